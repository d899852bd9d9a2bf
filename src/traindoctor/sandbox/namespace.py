"""A private ``/dev/shm`` for a Landlock trial: a mount namespace of its own with a tmpfs there.

Landlock restricts writes to folders, and ``/dev/shm`` must stay writable for a trial
(DataLoader workers share tensors and semaphores through it), so under Landlock alone a trial
could change what other programs keep there. Where the kernel lets this process make a mount
namespace (as root, or in a user namespace of its own, which most kernels allow an unprivileged
user), :func:`private_shm` mounts an empty tmpfs on ``/dev/shm`` that only the trial and the
processes it starts see; the machine's ``/dev/shm`` is then not writable to them at all.
"""

from __future__ import annotations

import ctypes
import functools
import os
import subprocess
import sys

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_NOSUID, MS_NODEV, MS_REC, MS_PRIVATE = 2, 4, 1 << 14, 1 << 18
SHM = "/dev/shm"


class NamespaceError(OSError):
    """The mount namespace or the tmpfs could not be made."""


def _call(libc: ctypes.CDLL, what: str, result: int) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise NamespaceError(err, f"{what}: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as fh:
        fh.write(text)


def private_shm() -> None:
    """Give this (single-threaded) process and every process it starts an empty, private
    ``/dev/shm``; raises :class:`NamespaceError` where the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        _call(libc, "unshare(CLONE_NEWNS)", libc.unshare(CLONE_NEWNS))
    else:  # a user namespace in which this user is itself, with the rights to mount
        _call(libc, "unshare(CLONE_NEWUSER | CLONE_NEWNS)", libc.unshare(CLONE_NEWUSER | CLONE_NEWNS))
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    # mounts made from here on stay in this namespace
    _call(libc, "mount(/, MS_PRIVATE)", libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None))
    _call(
        libc,
        f"mount(tmpfs, {SHM})",
        libc.mount(b"tmpfs", SHM.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777"),
    )


@functools.cache
def available() -> bool:
    """Whether :func:`private_shm` works here (tried once, in a child process)."""
    if not sys.platform.startswith("linux") or not os.path.isdir(SHM):
        return False
    probe = "from traindoctor.sandbox.namespace import private_shm; private_shm()"
    env = dict(os.environ)
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=30, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0
