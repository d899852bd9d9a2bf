"""Inside a trial: writes from Python to the view's links land on private copies instead of failing.

The operating system (:mod:`traindoctor.sandbox`) already refuses every write outside the trial's
writable folders; this guard is what lets a script still *work* in its view. Before Python
writes to a path of the view that leads to the user's file (a link the view made, or one the
script made), it replaces the link by a private copy (with the content, unless the write
truncates), and before it writes inside a folder linked whole, it replaces that link by a folder
of links. So ``open(..., "w"/"a"/"r+")``, ``io.FileIO``, ``os.open`` (without ``dir_fd``),
``np.memmap(mode="r+")``, ``os.truncate``, ``sqlite3.connect`` and ``torch.save`` work on the
view, and renames, removals, ``shutil.rmtree`` and new files happen in it. It is one audit hook
(:func:`sys.addaudithook`, which sees every ``open`` whatever the caller) plus a wrapper of
``torch.save``, whose C++ writer opens the file itself. Native code that writes through a link
(and a write with ``dir_fd``) is refused by the operating system instead.

Under Landlock the seccomp filter refuses ``chmod``/``chown``/``utime`` by path, so the guard
also routes ``os.chmod``, ``os.chown`` and ``os.utime`` of the trial's own files through a file
descriptor and refuses them (``EPERM``) on anything else, descriptors included.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from _typeshed import FileDescriptorOrPath, StrOrBytesPath

#: What to do with the last component of a path a write names.
KEEP, EMPTY, FOLDER, PARENTS = "keep", "empty", "folder", "parents"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND
_SQLITE_SIDECARS = ("", "-journal", "-wal", "-shm")


class Guard:
    """The trial's writable folders (``roots``) and how to make a path of them private."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = tuple(os.path.realpath(r) for r in roots if r)
        self._local = threading.local()

    def inside(self, path: str) -> bool:
        """Whether the absolute ``path`` lies in a writable folder."""
        return any(path == r or path.startswith(r + os.sep) for r in self.roots)

    # ---------------------------------------------------------------- making paths private
    def own(self, path: Any, last: str, dir_fd: int | None = None) -> None:
        """Make the path a write names private: every folder link on the way becomes a folder of
        links, and the last component, a link to a file outside, a copy (``KEEP``), an empty file
        (``EMPTY``), a folder of links (``FOLDER``), or is left alone (``PARENTS``)."""
        full = _absolute(path, dir_fd)
        if full is None:
            return
        root = next((r for r in self.roots if full == r or full.startswith(r + os.sep)), None)
        if root is None:
            return
        parts = [p for p in full[len(root) :].split(os.sep) if p]
        current = root
        for index, part in enumerate(parts):
            current = os.path.join(current, part)
            if not os.path.islink(current):
                if not os.path.lexists(current):
                    return  # created from here on, inside real folders
                continue
            target = os.path.realpath(current)
            if self.inside(target):
                current = target
                continue
            final = index == len(parts) - 1
            if os.path.isdir(target) and (not final or last == FOLDER):
                _materialize(current, target)
            elif final and last in (KEEP, EMPTY) and os.path.isfile(target):
                _copy_up(current, target, keep=last == KEEP)
                return
            else:
                return

    def _busy(self) -> bool:
        return bool(getattr(self._local, "busy", False))

    def _guarded(self, action: Callable[[], None]) -> None:
        """Run ``action`` once (not again for the audit events it raises itself); an error leaves
        the path as it was, and the operating system decides."""
        if self._busy():
            return
        self._local.busy = True
        try:
            action()
        except OSError:
            pass
        finally:
            self._local.busy = False

    # ---------------------------------------------------------------- the audit hook
    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        """The audit hook: make private what a write is about to touch."""
        handler = _HANDLERS.get(event)
        if handler is not None and not self._busy():
            handler(self, args)

    def check_descriptor(self, event: str, args: tuple[Any, ...]) -> None:
        """Under Landlock: refuse ``os.chmod``/``os.chown``/``os.utime`` on a descriptor of a file
        outside the writable folders (the seccomp filter lets descriptors through)."""
        if event in ("os.chmod", "os.chown", "os.utime") and args and isinstance(args[0], int):
            try:
                target = os.readlink(f"/proc/self/fd/{args[0]}")
            except OSError:
                return
            if not self.inside(target):
                raise PermissionError(errno.EPERM, "a trial may change only its own files", target)

    # ---------------------------------------------------------------- installing
    def install(self, *, landlock: bool) -> None:
        """Add the audit hook and wrap ``torch.save``; under ``landlock`` also the metadata calls."""
        if landlock:
            sys.addaudithook(self.check_descriptor)
            self._route_metadata_calls()
        sys.addaudithook(self.audit)
        self._wrap_torch_save()

    def _wrap_torch_save(self) -> None:
        try:
            import torch
            import torch.serialization as serialization
        except ImportError:  # pragma: no cover - the trials need torch
            return
        guard, real = self, torch.save

        def save(obj: object, f: Any, *args: Any, **kwargs: Any) -> None:
            if isinstance(f, (str, bytes, os.PathLike)):
                guard._guarded(lambda: guard.own(f, EMPTY))
            real(obj, f, *args, **kwargs)

        torch.save = serialization.save = save

    def _private_target(self, path: StrOrBytesPath) -> str:
        """The absolute path of ``path`` made private, or PermissionError when it is not the trial's."""
        full = os.path.abspath(os.fsdecode(path))
        self._guarded(lambda: self.own(full, KEEP))
        if not self.inside(os.path.realpath(full)):
            raise PermissionError(errno.EPERM, "a trial may change only its own files", full)
        return full

    def _route_metadata_calls(self) -> None:
        guard = self
        real_chmod, real_chown, real_utime = os.chmod, os.chown, os.utime

        def chmod(
            path: FileDescriptorOrPath, mode: int, *, dir_fd: int | None = None, follow_symlinks: bool = True
        ) -> None:
            if isinstance(path, int) or dir_fd is not None or not follow_symlinks:
                return real_chmod(path, mode, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
            with _Descriptor(guard._private_target(path)) as fd:
                real_chmod(fd, mode)

        def chown(
            path: FileDescriptorOrPath,
            uid: int,
            gid: int,
            *,
            dir_fd: int | None = None,
            follow_symlinks: bool = True,
        ) -> None:
            if isinstance(path, int) or dir_fd is not None or not follow_symlinks:
                return real_chown(path, uid, gid, dir_fd=dir_fd, follow_symlinks=follow_symlinks)
            with _Descriptor(guard._private_target(path)) as fd:
                real_chown(fd, uid, gid)

        def utime(
            path: FileDescriptorOrPath,
            times: tuple[int, int] | tuple[float, float] | None = None,
            *,
            ns: tuple[int, int] | None = None,
            dir_fd: int | None = None,
            follow_symlinks: bool = True,
        ) -> None:
            when: dict[str, Any] = {} if ns is None else {"ns": ns}
            if isinstance(path, int) or dir_fd is not None or not follow_symlinks:
                return real_utime(path, times, dir_fd=dir_fd, follow_symlinks=follow_symlinks, **when)
            with _Descriptor(guard._private_target(path)) as fd:
                real_utime(fd, times, **when)

        os.chmod, os.chown, os.utime = chmod, chown, utime


class _Descriptor:
    """``with _Descriptor(path) as fd``: a read-only descriptor of ``path`` (a file or a folder)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def _absolute(path: Any, dir_fd: int | None = None) -> str | None:
    """The absolute (lexical) path a call names, None for a descriptor or something else."""
    if isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
        return None
    name = os.fsdecode(os.fspath(path))
    if dir_fd is not None and dir_fd >= 0 and not os.path.isabs(name):
        try:
            name = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), name)
        except OSError:
            return None
    return os.path.abspath(name)


def _scratch_name(path: str) -> str:
    return f"{path}.traindoctor-{os.getpid()}-{threading.get_ident()}"


def _materialize(link: str, target: str) -> None:
    """Replace the link ``link`` to the folder ``target`` by a folder of links to its entries."""
    temporary = _scratch_name(link)
    os.mkdir(temporary)
    for entry in os.scandir(target):
        os.symlink(os.path.join(target, entry.name), os.path.join(temporary, entry.name))
    os.unlink(link)
    os.rename(temporary, link)


def _copy_up(link: str, target: str, *, keep: bool) -> None:
    """Replace the link ``link`` to the file ``target`` by a private file with its mode (and content)."""
    temporary = _scratch_name(link)
    if keep:
        shutil.copyfile(target, temporary)
    else:
        open(temporary, "xb").close()
    with _Descriptor(temporary) as fd:
        os.fchmod(fd, os.stat(target).st_mode & 0o7777)
    os.replace(temporary, link)


# ---------------------------------------------------------------- one handler per audit event
def _on_open(guard: Guard, args: tuple[Any, ...]) -> None:
    path, mode, flags = (tuple(args) + (None, None, 0))[:3]
    flags = flags or 0
    if isinstance(mode, str):
        writes, truncates, exclusive = any(c in mode for c in "wax+"), "w" in mode, "x" in mode
    else:
        writes, truncates, exclusive = bool(flags & _WRITE_FLAGS), bool(flags & os.O_TRUNC), bool(flags & os.O_EXCL)
    if writes:
        last = PARENTS if exclusive else EMPTY if truncates else KEEP
        guard._guarded(lambda: guard.own(path, last))


def _on_keep(guard: Guard, args: tuple[Any, ...]) -> None:
    """``os.truncate``, ``os.chmod``, ``os.chown``, ``os.utime``: the change applies to a copy."""
    dir_fd = args[-1] if len(args) > 2 and isinstance(args[-1], int) else None
    guard._guarded(lambda: guard.own(args[0], KEEP, dir_fd))


def _on_parents(guard: Guard, args: tuple[Any, ...]) -> None:
    """``os.remove``, ``os.rmdir``, ``os.mkdir``: the entry itself lives in the view's folder."""
    dir_fd = args[-1] if isinstance(args[-1], int) else None
    guard._guarded(lambda: guard.own(args[0], PARENTS, dir_fd))


def _on_two(guard: Guard, args: tuple[Any, ...]) -> None:
    """``os.rename``/``os.replace``, ``os.link``: both ends in the view's folders."""
    src, dst, src_fd, dst_fd = (tuple(args) + (None, None))[:4]
    guard._guarded(lambda: guard.own(src, PARENTS, src_fd))
    guard._guarded(lambda: guard.own(dst, PARENTS, dst_fd))


def _on_symlink(guard: Guard, args: tuple[Any, ...]) -> None:
    guard._guarded(lambda: guard.own(args[1], PARENTS, args[2] if len(args) > 2 else None))


def _on_rmtree(guard: Guard, args: tuple[Any, ...]) -> None:
    """``shutil.rmtree`` of a folder linked whole: it removes a folder of links."""
    guard._guarded(lambda: guard.own(args[0], FOLDER, args[1] if len(args) > 1 else None))


def _on_sqlite(guard: Guard, args: tuple[Any, ...]) -> None:
    database = args[0] if args else None
    if isinstance(database, (str, bytes, os.PathLike)):
        name = os.fsdecode(os.fspath(database))
        if name != ":memory:" and not name.startswith("file:"):

            def own_all() -> None:
                for suffix in _SQLITE_SIDECARS:
                    guard.own(name + suffix, KEEP)

            guard._guarded(own_all)


_HANDLERS: dict[str, Callable[[Guard, tuple[Any, ...]], None]] = {
    "open": _on_open,
    "os.truncate": _on_keep,
    "os.chmod": _on_keep,
    "os.chown": _on_keep,
    "os.utime": _on_keep,
    "os.remove": _on_parents,
    "os.rmdir": _on_parents,
    "os.mkdir": _on_parents,
    "os.rename": _on_two,
    "os.link": _on_two,
    "os.symlink": _on_symlink,
    "shutil.rmtree": _on_rmtree,
    "sqlite3.connect": _on_sqlite,
}


def install_from_env() -> Guard | None:
    """Install the guard this process's sandbox asked for (:data:`traindoctor.sandbox.ENV_KIND`)."""
    from traindoctor.sandbox.policy import ENV_KIND, ENV_WRITABLE, LANDLOCK

    roots = os.environ.get(ENV_WRITABLE, "")
    if not os.environ.get(ENV_KIND) or not roots:
        return None
    guard = Guard(roots.split(os.pathsep))
    guard.install(landlock=os.environ[ENV_KIND] == LANDLOCK)
    return guard
