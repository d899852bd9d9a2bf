"""Atomic checkpoint writes and ``keep_last`` rotation.

A checkpoint is written to a temporary file in the *same* folder, flushed and fsynced, then moved
over the destination with ``os.replace`` (atomic on POSIX and Windows for paths on one file
system), and finally the folder entry itself is fsynced. A process killed at any moment leaves
either the previous checkpoint or the new one at ``path``, never a truncated file; at worst a
``.<name>.tmp-*`` file is left behind, which the next successful save removes.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

TMP_MARKER = ".tmp-"


def _serialize(obj: Any, fileobj: BinaryIO) -> None:
    """Write ``obj`` with ``torch.save``. A separate function so tests can interrupt a write."""
    import torch

    torch.save(obj, fileobj)


def fsync_dir(folder: Path) -> None:
    """Persist the directory entry created by ``os.replace`` (no-op where unsupported)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _stale_temporaries(path: Path) -> list[Path]:
    prefix = f".{path.name}{TMP_MARKER}"
    return sorted(p for p in path.parent.glob(f".{glob_escape(path.name)}{TMP_MARKER}*") if p.name.startswith(prefix))


def glob_escape(name: str) -> str:
    """Escape glob metacharacters in a literal file name."""
    return re.sub(r"([\[\]*?])", r"[\1]", name)


def atomic_write(
    path: str | os.PathLike[str], obj: Any, serialize: Callable[[Any, BinaryIO], None] | None = None
) -> Path:
    """Write ``obj`` to ``path`` so that a crash never leaves a partial file at ``path``."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}{TMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}"
    write = serialize or _serialize
    try:
        with open(tmp, "wb") as fh:
            write(obj, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    fsync_dir(dest.parent)
    for stale in _stale_temporaries(dest):
        # Left by a process killed mid-write. A temporary of a live process may be in flight.
        if writer_alive(stale):
            continue
        try:
            stale.unlink()
        except OSError:
            pass
    return dest


def writer_alive(tmp: Path) -> bool:
    """Whether another process that is still running owns temporary ``tmp`` (its pid is in the
    name): its write may be in flight, so the file is not a stale leftover."""
    pid_text = tmp.name.rsplit(TMP_MARKER, 1)[-1].split("-", 1)[0]
    if not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


#: The last run of digits in a checkpoint's name (``120`` in ``step_000120.pt``): its number.
LAST_DIGITS = re.compile(r"(\d+)(?!.*\d)")


def rotation_siblings(path: Path) -> list[Path]:
    """Checkpoints that share ``path``'s naming pattern, oldest first.

    ``step_000120.pt`` matches ``step_<digits>.pt`` ordered by the number; a name without digits
    (``last.pt``) has numbered backups ``last.pt.1`` (newest) ... ``last.pt.N``.
    """
    match = LAST_DIGITS.search(path.name)
    if match:
        head, tail = path.name[: match.start()], path.name[match.end() :]
        pattern = re.compile(re.escape(head) + r"(\d+)" + re.escape(tail) + r"\Z")
        found = []
        for candidate in path.parent.iterdir():
            m = pattern.match(candidate.name)
            if m and candidate.is_file():
                found.append((int(m.group(1)), candidate.name, candidate))
        return [p for _, _, p in sorted(found)]
    backups = []
    for candidate in path.parent.glob(glob_escape(path.name) + ".*"):
        suffix = candidate.name[len(path.name) + 1 :]
        if suffix.isdigit():
            backups.append((int(suffix), candidate))
    ordered = [p for _, p in sorted(backups, reverse=True)]
    return ordered + ([path] if path.exists() else [])


def shift_backups(path: Path, keep_last: int) -> None:
    """Before overwriting a digit-less ``path``: ``path`` -> ``path.1`` -> ``path.2`` ..."""
    if keep_last <= 1 or not path.exists():
        return
    for index in range(keep_last - 1, 0, -1):
        older = path.with_name(f"{path.name}.{index}")
        if older.exists():
            if index + 1 >= keep_last:
                older.unlink()
            else:
                os.replace(older, path.with_name(f"{path.name}.{index + 1}"))
    backup = path.with_name(f"{path.name}.1")
    try:
        # A hard link keeps ``path`` in place until the atomic replace of the new checkpoint.
        os.link(path, backup)
    except OSError:
        import shutil

        shutil.copy2(path, backup)


def prune(path: Path, keep_last: int) -> list[Path]:
    """Delete the oldest checkpoints of ``path``'s pattern beyond ``keep_last``; return them."""
    if keep_last < 1:
        raise ValueError("keep_last must be >= 1")
    siblings = rotation_siblings(path)
    doomed = siblings[: max(0, len(siblings) - keep_last)]
    for old in doomed:
        if old == path:
            continue
        try:
            old.unlink()
        except OSError:
            pass
    return doomed
