"""Linux Landlock through ``ctypes``: make everything read-only except a few folders, for good.

Landlock (Linux >= 5.13, enabled in most distributions' kernels) lets an unprivileged process
restrict its own file-system access, and that of every process it starts. :func:`restrict` keeps
reading, listing and executing everywhere, and allows writing, creating, removing, renaming,
linking and truncating only beneath the given folders (and writing to a few device files); it
cannot be undone. ABI 3 (Linux 6.2) is the least this module uses: ABI 1 refuses every rename
across folders, ABI 2 does not restrict ``truncate``.

Landlock does not govern changes of mode, owner, times or extended attributes
(``chmod``, ``chown``, ``utime``, ``setxattr``); :mod:`traindoctor.sandbox.seccomp` refuses those.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Iterable

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same on every architecture
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38

#: Access rights (``LANDLOCK_ACCESS_FS_*``).
WRITE_FILE = 1 << 1
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3

#: Every right that changes the file system (reading and executing stay unrestricted).
WRITES = (
    WRITE_FILE
    | REMOVE_DIR
    | REMOVE_FILE
    | MAKE_CHAR
    | MAKE_DIR
    | MAKE_REG
    | MAKE_SOCK
    | MAKE_FIFO
    | MAKE_BLOCK
    | MAKE_SYM
    | REFER
    | TRUNCATE
)
#: The rights a rule on a file (not a folder) may carry.
FILE_WRITES = WRITE_FILE | TRUNCATE
MIN_ABI = 3


class LandlockError(OSError):
    """Landlock is missing, too old, or refused a rule."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def abi() -> int:
    """The Landlock ABI version this kernel offers (0: none, or not Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        version = _libc().syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def _fail(what: str) -> LandlockError:
    err = ctypes.get_errno()
    return LandlockError(err, f"landlock: {what}: {os.strerror(err)}")


def restrict(writable: Iterable[str], device_files: Iterable[str] = ()) -> None:
    """Allow writes only beneath the folders ``writable`` and to the existing ``device_files``
    (files or folders) from now on, in this process and every process it starts."""
    if abi() < MIN_ABI:
        raise LandlockError(0, f"landlock: this kernel offers ABI {abi()}, {MIN_ABI} is needed")
    libc = _libc()
    attr = _RulesetAttr(WRITES)
    ruleset = int(libc.syscall(SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0))
    if ruleset < 0:
        raise _fail("create_ruleset")
    try:
        for path in writable:
            _allow(libc, ruleset, path, WRITES)
        for path in device_files:
            if os.path.exists(path):
                _allow(libc, ruleset, path, WRITES if os.path.isdir(path) else FILE_WRITES)
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise _fail("prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(SYS_RESTRICT_SELF, ruleset, 0) != 0:
            raise _fail("restrict_self")
    finally:
        os.close(ruleset)


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, access: int) -> None:
    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        rule = _PathBeneathAttr(access, fd)
        if libc.syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            raise _fail(f"add_rule({path})")
    finally:
        os.close(fd)
