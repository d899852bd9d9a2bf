"""Where verify-resume's runs execute: a mirror of the user's working directory.

Training scripts open relative paths (``configurator.py``, ``data/shakespeare/train.bin``,
``config/train.yaml``), so each run must start where the user runs the script. But the three runs
must not see each other's checkpoints, and must never overwrite the user's files (an ``out/ckpt.pt``
from an earlier real run). So each scenario runs in a *mirror*: a fresh folder whose directories
are real directories and whose files are symbolic links to the user's files. Reading works as in
the user's folder; new files land in the mirror. Writing *through* a link would change the user's
file, so :func:`install_write_guard` (run in the child before the script) replaces such a link by
a private file first, for ``open``/``io.open``/``Path.open`` in a write or append mode and for
``torch.save``; ``os.replace`` and ``os.rename`` replace the link itself anyway. Large trees (a
dataset folder of many files) are linked as one directory beyond :data:`MAX_ENTRIES` entries, and
so are hidden folders (``.git``): reading works, and runs are not expected to write there.
"""

from __future__ import annotations

import builtins
import io
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: Entries mirrored one by one at most; beyond that, remaining directories are linked whole.
MAX_ENTRIES = 20000


def mirror(source: str, target: Path, *, skip: tuple[str, ...] = (), max_entries: int = MAX_ENTRIES) -> int:
    """Mirror ``source`` into ``target`` (created): directories copied, files linked. Returns the
    number of entries created. Paths in ``skip`` (absolute, real) are left out (the run folder
    itself when it lives inside the working directory)."""
    target.mkdir(parents=True, exist_ok=True)
    skipped = {os.path.realpath(s) for s in skip}
    count = 0
    pending: list[tuple[str, Path]] = [(os.path.realpath(source), target)]
    while pending:
        src, dst = pending.pop()
        try:
            entries = list(os.scandir(src))
        except OSError:
            continue
        for entry in entries:
            real = os.path.realpath(entry.path)
            if real in skipped:
                continue
            out = dst / entry.name
            count += 1
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir and not entry.name.startswith(".") and count < max_entries:
                out.mkdir(exist_ok=True)
                pending.append((entry.path, out))
            else:
                try:
                    os.symlink(real, out, target_is_directory=is_dir)
                except OSError:
                    pass
    return count


def _private(path: Any, keep: bool) -> None:
    """If ``path`` is a link in the mirror, make it a private file (with the content if ``keep``)."""
    try:
        name = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else None
    except TypeError:
        return
    if not name or not os.path.islink(name):
        return
    target = os.path.realpath(name)
    os.unlink(name)
    if keep and os.path.isfile(target):
        shutil.copyfile(target, name)


def install_write_guard() -> None:
    """Writes through the mirror's links go to private files, never to the user's files."""
    original_open: Callable[..., Any] = builtins.open

    def guarded_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(mode, str) and any(c in mode for c in "wxa+") and not isinstance(file, int):
            try:
                _private(file, keep=any(c in mode for c in "a+"))
            except OSError:
                pass
        return original_open(file, mode, *args, **kwargs)

    builtins.open = guarded_open
    io.open = guarded_open  # pathlib's Path.open / write_bytes go through io.open
    if hasattr(Path, "_accessor"):  # pragma: no cover - Python < 3.11
        pass


def guard_torch_save(save: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.save`` writes in C++ (it follows links): make the target private first."""

    def guarded(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            _private(f, keep=False)
        except OSError:
            pass
        return save(obj, f, *args, **kwargs)

    return guarded
