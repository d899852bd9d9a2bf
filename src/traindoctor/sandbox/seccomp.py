"""A seccomp filter through ``ctypes``: refuse the system calls that change a file's metadata by path.

Landlock governs writes, not ``chmod``, ``chown``, ``utime`` or extended attributes. Under
Landlock a trial therefore also gets this filter, which makes those calls fail with ``EPERM``:

* by path: ``chmod``, ``fchmodat``, ``fchmodat2``, ``chown``, ``lchown``, ``fchownat``, ``utime``,
  ``utimes``, ``futimesat``, ``utimensat`` with a path, ``file_setattr``;
* extended attributes (ACLs among them), by path or descriptor, and ``io_uring_setup`` (io_uring
  can set extended attributes without a system call of its own).

``fchmod``, ``fchown`` and ``utimensat`` on a descriptor stay allowed: :mod:`traindoctor.sandbox.guard`
routes Python's ``os.chmod``/``os.chown``/``os.utime`` of the trial's own files through them and
refuses the others. The filter is inherited by every process the trial starts and cannot be lifted.
x86-64 and arm64 only (:func:`supported`).
"""

from __future__ import annotations

import ctypes
import errno
import platform

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000

# BPF instructions (linux/filter.h)
LD_W_ABS = 0x20
JEQ_K = 0x15
JGE_K = 0x35
RET_K = 0x06

#: seccomp_data offsets: nr, arch, args[1] (low and high word, little-endian).
NR, ARCH, ARG1_LO, ARG1_HI = 0, 4, 24, 28

#: machine -> (AUDIT_ARCH_*, denied syscall numbers, utimensat's number, x32 bit or 0)
TABLES: dict[str, tuple[int, tuple[int, ...], int, int]] = {
    "x86_64": (
        0xC000003E,
        # chmod chown lchown utime utimes futimesat fchownat fchmodat
        (90, 92, 94, 132, 235, 261, 260, 268)
        # setxattr lsetxattr fsetxattr removexattr lremovexattr fremovexattr
        + (188, 189, 190, 197, 198, 199)
        # io_uring_setup fchmodat2 setxattrat removexattrat file_setattr
        + (425, 452, 463, 466, 469),
        280,
        0x40000000,
    ),
    "aarch64": (
        0xC00000B7,
        # setxattr lsetxattr fsetxattr removexattr lremovexattr fremovexattr fchmodat fchownat
        (5, 6, 7, 14, 15, 16, 53, 54)
        # io_uring_setup fchmodat2 setxattrat removexattrat file_setattr
        + (425, 452, 463, 466, 469),
        88,
        0,
    ),
}


class SeccompError(OSError):
    """The filter could not be installed."""


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def supported() -> bool:
    """Whether this machine's architecture has a table here."""
    return platform.machine() in TABLES


def program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter for ``machine`` as (code, jt, jf, k) instructions."""
    arch, denied, utimensat, x32 = TABLES[machine]
    deny = RET_ERRNO | errno.EPERM
    out: list[tuple[int, int, int, int]] = [(LD_W_ABS, 0, 0, ARCH), (JEQ_K, 1, 0, arch), (RET_K, 0, 0, deny)]
    out.append((LD_W_ABS, 0, 0, NR))
    if x32:
        out.append((JGE_K, 0, 1, x32))  # the x32 ABI's numbers: refused
        out.append((RET_K, 0, 0, deny))
    for number in denied:
        out.append((JEQ_K, 0, 1, number))
        out.append((RET_K, 0, 0, deny))
    # utimensat(fd, NULL, ...) changes the times of an open descriptor: allowed; with a path: refused
    out.append((JEQ_K, 0, 5, utimensat))
    out.append((LD_W_ABS, 0, 0, ARG1_LO))
    out.append((JEQ_K, 0, 2, 0))
    out.append((LD_W_ABS, 0, 0, ARG1_HI))
    out.append((JEQ_K, 1, 0, 0))
    out.append((RET_K, 0, 0, deny))
    out.append((RET_K, 0, 0, RET_ALLOW))
    return out


def deny_metadata_changes() -> None:
    """Install the filter in this process (and so in every process it starts)."""
    machine = platform.machine()
    if machine not in TABLES:
        raise SeccompError(0, f"seccomp: no system call table for {machine}")
    code = program(machine)
    filters = (_Filter * len(code))(*[_Filter(*instruction) for instruction in code])
    prog = _Program(len(code), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise SeccompError(err, f"seccomp: prctl(PR_SET_NO_NEW_PRIVS): {errno.errorcode.get(err, err)}")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise SeccompError(err, f"seccomp: prctl(PR_SET_SECCOMP): {errno.errorcode.get(err, err)}")
