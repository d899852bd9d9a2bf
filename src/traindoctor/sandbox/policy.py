"""Which sandbox a trial runs in, and how to start a command in it.

:func:`detect` picks the strongest sandbox this machine offers:

* ``landlock`` (Linux >= 6.2 with Landlock, x86-64 or arm64): the trial's process restricts itself
  before it runs anything (:mod:`traindoctor.sandbox.launch`): writes only beneath the trial's
  scratch folder, ``/dev/shm`` and the device files drivers need (:data:`DEVICE_FILES`), no change
  of mode, owner, times or extended attributes by path (:mod:`traindoctor.sandbox.seccomp`);
  ``/dev/shm`` is a private tmpfs where the kernel lets the trial make a mount namespace
  (:mod:`traindoctor.sandbox.namespace`), else the machine's (:attr:`Sandbox.shm`);
* ``bubblewrap`` (``bwrap`` installed and allowed to make a mount namespace): the whole file system
  mounted read-only but the scratch folder, ``/dev`` as it is, a private ``/dev/shm``;
* ``none``: no sandbox; only with ``--allow-writes`` (:class:`SandboxUnavailable` otherwise).

Every kind runs the trial in a view of the user's folder (:mod:`traindoctor.sandbox.view`) with
the in-process guard (:mod:`traindoctor.sandbox.guard`), which :data:`ENV_KIND` and
:data:`ENV_WRITABLE` tell the child about. Both tune trials and verify-resume runs start here.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from traindoctor.sandbox import landlock, namespace, seccomp

LANDLOCK, BUBBLEWRAP, NONE = "landlock", "bubblewrap", "none"
#: What a caller may ask for (``auto``: the first of Landlock, bubblewrap that works here;
#: ``none`` only with ``allow_writes``).
KINDS = ("auto", LANDLOCK, BUBBLEWRAP, NONE)
ENV_KIND = "TRAINDOCTOR_SANDBOX"
ENV_WRITABLE = "TRAINDOCTOR_SANDBOX_WRITABLE"
#: ``private`` (the launcher mounts a private ``/dev/shm``) or ``shared``.
ENV_SHM = "TRAINDOCTOR_SANDBOX_SHM"
PRIVATE, SHARED = "private", "shared"
#: Device files a trial may write (under Landlock): the null and random devices, terminals,
#: shared memory (DataLoader workers, NCCL) and the GPU drivers' devices.
DEVICE_FILES = (
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
    "/dev/nvidia*",
    "/dev/nvidia-caps",
    "/dev/dri",
    "/dev/kfd",
    "/dev/infiniband",
)
UNSANDBOXED = (
    "no sandbox (Landlock or bubblewrap) on this machine, and --allow-writes was given: the runs "
    "start in a copy of this folder made of links, but a write outside Python's open() and "
    "torch.save (a subprocess, native code, an absolute path) can change your files"
)


#: bubblewrap's mounts: everything read-only, ``/dev`` as it is with a private ``/dev/shm``, a fresh ``/proc``.
_BWRAP_MOUNTS = ("--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc")


class SandboxUnavailable(Exception):
    """No sandbox of the kind asked for works here (and writes were not allowed)."""


def device_files() -> list[str]:
    """The existing paths of :data:`DEVICE_FILES`."""
    return sorted({path for pattern in DEVICE_FILES for path in glob.glob(pattern)})


@functools.cache
def works(kind: str) -> bool:
    """Whether the sandbox ``kind`` can start here (bubblewrap is tried once, for real)."""
    if kind == LANDLOCK:
        return landlock.abi() >= landlock.MIN_ABI and seccomp.supported()
    if kind == BUBBLEWRAP:
        bwrap = shutil.which("bwrap")
        if bwrap is None:
            return False
        try:
            probe = subprocess.run([bwrap, *_BWRAP_MOUNTS, "--", "true"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return False
        return probe.returncode == 0
    return False


def detect(kind: str = "auto", *, allow_writes: bool = False) -> str:
    """The sandbox to use: ``kind`` (or the first that works for ``auto``); ``none`` only with
    ``allow_writes``. Raises :class:`SandboxUnavailable` with what to do."""
    if kind not in KINDS:
        raise SandboxUnavailable(f"unknown sandbox {kind!r} (one of {', '.join(KINDS)})")
    candidates = (LANDLOCK, BUBBLEWRAP) if kind == "auto" else () if kind == NONE else (kind,)
    for candidate in candidates:
        if works(candidate):
            return candidate
    if allow_writes:
        return NONE
    wanted = "Landlock (Linux >= 6.2) or bubblewrap (`bwrap`)" if kind in ("auto", NONE) else kind
    raise SandboxUnavailable(
        f"no sandbox for the runs on this machine: {wanted} is needed to keep them from changing "
        "your files; install bubblewrap, or pass --allow-writes to run them without one"
    )


@dataclass(frozen=True)
class Sandbox:
    """A sandbox of ``kind`` whose processes may write only beneath ``writable``."""

    kind: str
    writable: tuple[str, ...]

    @property
    def shm(self) -> str:
        """Whether the trial's ``/dev/shm`` is its own (:data:`PRIVATE`) or the machine's (:data:`SHARED`)."""
        if self.kind == BUBBLEWRAP or (self.kind == LANDLOCK and namespace.available()):
            return PRIVATE
        return SHARED

    def command(self, cmd: Sequence[str], cwd: str) -> list[str]:
        """``cmd``, started inside the sandbox in the folder ``cwd``."""
        if self.kind == LANDLOCK:
            return [sys.executable, "-m", "traindoctor.sandbox.launch", "--", *cmd]
        if self.kind == BUBBLEWRAP:
            binds = [arg for path in self.writable for arg in ("--bind", path, path)]
            bwrap = shutil.which("bwrap") or "bwrap"
            return [bwrap, "--die-with-parent", *_BWRAP_MOUNTS, *binds, "--chdir", cwd, "--", *cmd]
        return list(cmd)

    def env(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` plus what the sandboxed process needs: the guard's settings, temporary files
        and caches in the scratch folder (created), no ``__pycache__`` written."""
        scratch = self.writable[0]
        tmp, triton = os.path.join(scratch, "tmp"), os.path.join(scratch, "cache", "triton")
        os.makedirs(tmp, exist_ok=True)
        os.makedirs(triton, exist_ok=True)
        env = dict(base)
        env.update(
            {
                ENV_KIND: self.kind,
                ENV_WRITABLE: os.pathsep.join(self.writable),
                ENV_SHM: self.shm,
                "TMPDIR": tmp,
                "TRITON_CACHE_DIR": triton,
                "PYTHONDONTWRITEBYTECODE": "1",
            }
        )
        return env


def choose(writable: Sequence[str], kind: str = "auto", *, allow_writes: bool = False) -> Sandbox:
    """The sandbox :func:`detect` picks, writable beneath ``writable`` (real paths)."""
    return Sandbox(detect(kind, allow_writes=allow_writes), tuple(os.path.realpath(w) for w in writable))
