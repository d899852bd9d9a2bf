"""Keep a tuning trial from touching the user's files: writes go to a scratch folder.

A trial runs the user's own script, which may save checkpoints, write logs or delete old files.
Inside the trial process every write is redirected: a path outside the scratch folder (and outside
``/dev`` and ``/proc``) is mapped to ``SCRATCH/redirected/<absolute path>``. Reads of a path the
trial has written read the redirected copy, so a script that writes then reads its own file still
works; reads of everything else are untouched. Covered: ``open``/``io.open`` (and so
``pathlib``, ``json.dump``, NumPy), ``os.open`` with a write flag, ``torch.save`` (its file writer
is C++ and bypasses ``open``), ``os.replace``/``os.rename``, ``os.remove``/``os.unlink``,
``os.mkdir``/``os.makedirs``, ``os.rmdir`` and ``shutil.rmtree`` (deleting a user's file is a
no-op). Extensions that open files in C themselves are not covered.
"""

from __future__ import annotations

import builtins
import io
import os
import shutil
import tempfile
from collections.abc import Callable
from typing import Any

_ALLOWED_PREFIXES = ("/dev/", "/proc/", "/sys/")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_makedirs = os.makedirs  # the real one, kept before install() patches it


class Sandbox:
    """Path redirection for one trial process. ``install()`` patches; nothing is ever restored
    (the trial process ends with the trial)."""

    def __init__(self, scratch: str | os.PathLike[str]) -> None:
        self.scratch = os.path.realpath(os.fspath(scratch))
        self.root = os.path.join(self.scratch, "redirected")
        _makedirs(self.root, exist_ok=True)
        self.redirected: set[str] = set()

    # ---------------------------------------------------------------- mapping
    def _inside(self, path: str) -> bool:
        return path == self.scratch or path.startswith(self.scratch + os.sep) or path.startswith(_ALLOWED_PREFIXES)

    def target(self, path: Any) -> Any:
        """Where a write to ``path`` goes (``path`` itself when it may be written)."""
        if isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
            return path
        raw = os.fsdecode(os.fspath(path))
        full = os.path.abspath(raw)
        if self._inside(full) or self._inside(os.path.realpath(full)):
            return path
        mapped = os.path.join(self.root, full.lstrip(os.sep))
        _makedirs(os.path.dirname(mapped), exist_ok=True)
        self.redirected.add(full)
        return mapped

    def source(self, path: Any) -> Any:
        """Where a read of ``path`` comes from: the redirected copy when the trial wrote one."""
        if isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
            return path
        full = os.path.abspath(os.fsdecode(os.fspath(path)))
        if self._inside(full):
            return path
        mapped = os.path.join(self.root, full.lstrip(os.sep))
        return mapped if os.path.lexists(mapped) else path

    # ---------------------------------------------------------------- patches
    def install(self) -> None:
        box = self
        # Temporary files (multiprocessing's sockets, the script's own) go to the scratch folder.
        tmp = os.path.join(self.scratch, "tmp")
        _makedirs(tmp, exist_ok=True)
        os.environ["TMPDIR"] = tmp
        tempfile.tempdir = tmp
        real_open = builtins.open
        real_os_open = os.open

        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            writes = any(c in mode for c in "wax+")
            return real_open(box.target(file) if writes else box.source(file), mode, *args, **kwargs)

        def os_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            if kwargs.get("dir_fd") is None:
                path = box.target(path) if flags & _WRITE_FLAGS else box.source(path)
            return real_os_open(path, flags, *args, **kwargs)

        builtins.open = open_
        io.open = open_
        os.open = os_open

        def two(real: Callable[..., Any]) -> Callable[..., Any]:
            def moved(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
                return real(box.source(src), box.target(dst), *args, **kwargs)

            return moved

        def gone(real: Callable[..., Any]) -> Callable[..., Any]:
            def remove(path: Any, *args: Any, **kwargs: Any) -> Any:
                if kwargs.get("dir_fd") is not None:
                    return real(path, *args, **kwargs)
                mapped = box.source(path)
                if mapped is path and box.target(path) is not path:
                    return None  # the user's own file: pretend it was removed
                return real(mapped, *args, **kwargs)

            return remove

        def made(real: Callable[..., Any]) -> Callable[..., Any]:
            def mkdir(path: Any, *args: Any, **kwargs: Any) -> Any:
                return real(box.target(path), *args, **kwargs)

            return mkdir

        os.replace = two(os.replace)
        os.rename = two(os.rename)
        os.remove = gone(os.remove)
        os.unlink = gone(os.unlink)
        os.rmdir = gone(os.rmdir)
        shutil.rmtree = gone(shutil.rmtree)  # type: ignore[assignment]  # typeshed's rmtree protocol has an attribute
        os.mkdir = made(os.mkdir)
        os.makedirs = made(os.makedirs)
        self._patch_torch_save()

    def _patch_torch_save(self) -> None:
        import torch
        import torch.serialization as serialization

        box = self
        real_save = serialization.save
        real_load = serialization.load

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            return real_save(obj, box.target(f), *args, **kwargs)

        def load(f: Any, *args: Any, **kwargs: Any) -> Any:
            return real_load(box.source(f), *args, **kwargs)

        torch.save = serialization.save = save
        torch.load = serialization.load = load
