"""Write a fixed file so that it is either fully rewritten or not touched at all.

The new bytes go to a temporary file in the same folder, are flushed to disk, get the original's
owner, group and permission bits, and replace the original with one ``rename`` (atomic on POSIX
and Windows). A crash, a full disk or a permission problem therefore never leaves a half-written
source file. A read-only file is refused up front: rename would replace it even though it cannot
be written; so is a file whose owner or group the new file cannot be given (another user's file,
written by someone who may not give files away): the rename would change who owns it.
Symbolic links are followed, so the file they point to is fixed and the link stays a link.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path


def write_atomically(path: str | Path, data: bytes) -> None:
    """Replace ``path``'s content with ``data``; raise ``OSError`` and leave it intact on failure."""
    target = Path(os.path.realpath(path))
    status = target.stat()
    mode = stat.S_IMODE(status.st_mode)
    # The write bits too: root may write anything, but a file nobody may write stays as it is.
    if not os.access(target, os.W_OK) or not mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH):
        raise PermissionError(errno.EACCES, "the file is read-only", str(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".traindoctor-tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
            _keep_owner(handle.fileno(), status, str(path))
        os.chmod(tmp, mode)  # after the owner: changing it may clear the set-id bits
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _keep_owner(fd: int, original: os.stat_result, path: str) -> None:
    """Give the open file ``fd`` the owner and group of ``original`` (where they differ)."""
    current = os.fstat(fd)
    if (current.st_uid, current.st_gid) == (original.st_uid, original.st_gid) or not hasattr(os, "fchown"):
        return  # the usual case; Windows has no owners to keep
    try:
        os.fchown(fd, original.st_uid, original.st_gid)
    except PermissionError:
        raise PermissionError(errno.EPERM, "cannot keep the file's owner and group", path) from None
