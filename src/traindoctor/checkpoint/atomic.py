"""Atomic checkpoint writes and ``keep_last`` rotation.

A checkpoint is written to a temporary file in the *same* folder, flushed and fsynced, then moved
over the destination with ``os.replace`` (atomic on POSIX and Windows for paths on one file
system), and finally the folder entry itself is fsynced. A process killed at any moment leaves
either the previous checkpoint or the new one at ``path``, never a truncated file; at worst a
``.<name>.tmp-*`` file is left behind, which the next successful save removes.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, cast

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


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, a file-size limit, a write error).

    The message names the path and the cause; the previous checkpoints are left as they were.
    """


class _Recorder:
    """A binary file that remembers the first ``OSError`` a write raised.

    ``torch.save`` turns an error of the file it writes to into a ``RuntimeError`` of its own
    ("unexpected pos ..."); the recorded error says what really happened (``ENOSPC``).
    """

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def flush(self) -> None:
        self.fh.flush()

    def tell(self) -> int:
        return self.fh.tell()

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.fh.seek(offset, whence)

    def fileno(self) -> int:
        return self.fh.fileno()

    @property
    def name(self) -> Any:
        """The file's name (the runtime audit reports a ``torch.save`` under it)."""
        return self.fh.name


def _write_error(dest: Path, exc: BaseException, recorded: OSError | None) -> CheckpointWriteError:
    """The error to raise for a failed write of ``dest``: its path and its real cause."""
    cause = recorded if recorded is not None else exc
    number = cause.errno if isinstance(cause, OSError) else None
    if number in (errno.ENOSPC, errno.EDQUOT):
        why = "the disk is full" if number == errno.ENOSPC else "the disk quota is exhausted"
    elif number == errno.EFBIG:
        why = "the file is larger than the file-size limit allows"
    elif isinstance(cause, OSError):
        why = cause.strerror or str(cause)
    else:
        why = f"{type(cause).__name__}: {cause}"
    message = f"cannot write checkpoint {dest}: {why}; the previous checkpoints are left as they were"
    return CheckpointWriteError(number or 0, message)


def _write_temporary(tmp: Path, dest: Path, obj: Any, write: Callable[[Any, BinaryIO], None]) -> None:
    """``obj`` written, flushed and fsynced to ``tmp``; a failure is a :class:`CheckpointWriteError`."""
    recorder: _Recorder | None = None
    try:
        with open(tmp, "wb") as fh:
            recorder = _Recorder(fh)
            write(obj, cast(BinaryIO, recorder))  # it has every method torch.save uses
            fh.flush()
            os.fsync(fh.fileno())
    except (OSError, RuntimeError) as exc:
        raise _write_error(dest, exc, recorder.error if recorder else None) from exc


def atomic_write(
    path: str | os.PathLike[str],
    obj: Any,
    serialize: Callable[[Any, BinaryIO], None] | None = None,
    keep_last: int | None = None,
) -> Path:
    """Write ``obj`` to ``path`` so that a crash never leaves a partial file at ``path``.

    ``keep_last=N`` keeps N checkpoints of ``path``'s naming pattern (see :func:`rotate`); the
    backups are shifted only once the new file is complete, and the oldest is removed only once
    it is in place, so a save killed or failed at any moment leaves the previous N intact (and at
    most one more, which the next save removes before it shifts anything).
    """
    if keep_last is not None and keep_last < 1:
        raise ValueError("keep_last must be >= 1")
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.parent / f".{dest.name}{TMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}"
    write = serialize or _serialize
    numbered = LAST_DIGITS.search(dest.name) is not None
    try:
        _write_temporary(tmp, dest, obj, write)
        if keep_last is not None:
            # A save killed after its commit and before its prune left one checkpoint too many:
            # prune it now, so that two such kills in a row never leave two too many.
            prune(dest, keep_last)
        if keep_last is not None and keep_last > 1 and not numbered:
            shift_backups(dest)
        os.replace(tmp, dest)
    except BaseException:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    fsync_dir(dest.parent)
    if keep_last is not None:
        prune(dest, keep_last)
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


def _backups(path: Path) -> list[tuple[int, Path]]:
    """The numbered backups ``path.1``, ``path.2`` ... of a digit-less ``path``, newest first."""
    found = []
    for candidate in path.parent.glob(glob_escape(path.name) + ".*"):
        suffix = candidate.name[len(path.name) + 1 :]
        if suffix.isdigit() and candidate.is_file():
            found.append((int(suffix), candidate))
    return sorted(found)


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
    ordered = [p for _, p in reversed(_backups(path))]
    return ordered + ([path] if path.exists() else [])


def shift_backups(path: Path) -> None:
    """Just before a new digit-less ``path`` replaces the old: ``path.i`` -> ``path.i+1``, and
    ``path`` linked as ``path.1``.

    Every step is one atomic rename or link, and nothing is deleted here (:func:`prune` removes
    the oldest once the new file is in place), so a kill between two steps loses no checkpoint.
    A ``path.1`` that is ``path`` itself (a save killed between the link and its commit) is
    dropped first, so no checkpoint is ever kept twice.
    """
    if not path.exists():
        return
    first = path.with_name(f"{path.name}.1")
    try:
        if first.exists() and os.path.samefile(first, path):
            first.unlink()
    except OSError:
        pass
    for index, older in reversed(_backups(path)):
        os.replace(older, path.with_name(f"{path.name}.{index + 1}"))
    try:
        # A hard link keeps ``path`` in place until the atomic replace of the new checkpoint.
        os.link(path, first)
    except OSError:
        # No hard links here: ``path`` is absent for the instant between two renames.
        os.replace(path, first)


def prune(path: Path, keep_last: int) -> list[Path]:
    """Delete the oldest checkpoints of ``path``'s pattern beyond ``keep_last``; return them."""
    if keep_last < 1:
        raise ValueError("keep_last must be >= 1")
    siblings = rotation_siblings(path)
    doomed = [old for old in siblings[: max(0, len(siblings) - keep_last)] if old != path]
    for old in doomed:
        try:
            old.unlink()
        except OSError:
            pass
    return doomed
