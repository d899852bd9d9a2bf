"""Opening the files of a checkpoint: regular files only, inside their checkpoint, read within limits.

A FIFO named ``x.pt`` blocks the first ``open`` for reading forever, ``/dev/zero`` never ends,
and a DCP ``.metadata`` may name any path as a shard (``/etc/passwd``, ``../../x``, a symlink out
of the folder). :func:`open_regular` looks at the file before opening it (a special file is
refused by its kind, never opened for reading) and checks again on the open descriptor;
:func:`inside` resolves a path named by the checkpoint and refuses one that leaves its folder.
Every refusal is a :class:`~traindoctor.checkpoint.inspection.CheckpointReadError` with a message.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO

from traindoctor.checkpoint.inspection import CheckpointReadError
from traindoctor.checkpoint.limits import LimitExceeded

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str | None:
    """What a non-regular file is ("a FIFO (named pipe)"), None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refuse_special(name: str, mode: int) -> None:
    kind = _kind(mode)
    if kind is not None:
        raise CheckpointReadError(f"refused: {os.path.basename(name) or name} is {kind}, not a regular file")


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened for binary reading, after checking that it is a regular file.

    The kind is checked with ``stat`` first (a FIFO or device is refused without being opened)
    and again on the descriptor, opened non-blocking, in case the path changed in between.
    """
    name = os.fspath(path)
    try:
        _refuse_special(name, os.stat(name).st_mode)
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise CheckpointReadError(f"cannot read: {exc.strerror or exc}") from None
    try:
        _refuse_special(name, os.fstat(fd).st_mode)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def read_limited(path: str | os.PathLike[str], limit: int, what: str) -> bytes:
    """The bytes of the regular file ``path``, refusing a file larger than ``limit`` bytes."""
    with open_regular(path) as fh:
        try:
            data = fh.read(limit + 1)
        except OSError as exc:
            raise CheckpointReadError(f"cannot read {what}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise LimitExceeded(f"{what} is larger than {limit} bytes", "pickle_bytes", limit)
    return data


def inside(folder: Path, relative: object, what: str) -> Path:
    """``folder / relative`` if it names a regular file inside ``folder`` (symlinks resolved).

    ``relative`` comes from the checkpoint itself: an absolute path, a ``..`` that climbs out,
    a symlink that points elsewhere or anything but a string is refused, naming ``what``.
    """
    if not isinstance(relative, str) or not relative or "\x00" in relative:
        raise CheckpointReadError(f"refused: {what} is not a file name")
    shown = relative[:200]
    if os.path.isabs(relative) or Path(relative).drive:
        raise CheckpointReadError(
            f"refused: {what} is an absolute path ({shown}); a shard must be inside the checkpoint"
        )
    try:
        root = folder.resolve()
        target = (folder / relative).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise CheckpointReadError(f"refused: {what} ({shown}) cannot be resolved: {exc}") from None
    if target != root and root not in target.parents:
        raise CheckpointReadError(f"refused: {what} ({shown}) resolves to {target}, outside the checkpoint {root}")
    return target
