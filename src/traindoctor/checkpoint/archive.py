"""The pickles of one torch file, read within limits: a zip archive's ``data.pkl``, or a raw stream.

``torch.save`` writes a zip archive (``<name>/data.pkl`` plus one member per storage); older
torch wrote a "legacy" stream of pickles (a magic number, the protocol version, system info, the
data); anything else that starts with pickle opcodes is a raw pickle, of any protocol (0-5),
which ``torch.load(weights_only=False)`` and ``pickle.load`` both execute. The zip's central
directory is counted before :mod:`zipfile` parses it and ``data.pkl`` is decompressed only up to
the byte limit, so neither a million members nor a zip bomb costs more than the limits allow.
"""

from __future__ import annotations

import struct
import zipfile
from dataclasses import dataclass, field
from typing import BinaryIO

from traindoctor.checkpoint.allowlist import is_allowed
from traindoctor.checkpoint.files import open_regular
from traindoctor.checkpoint.inspection import CheckpointReadError
from traindoctor.checkpoint.limits import Budget, LimitExceeded
from traindoctor.checkpoint.pickle_reader import GlobalUse, PickleError, ReadResult, read_pickle

ZIP_MAGIC = b"PK\x03\x04"
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_CENTRAL = b"PK\x01\x02"
_TRUNCATED = "corrupt or truncated checkpoint: the zip archive's directory is missing (was the write interrupted?)"


@dataclass
class TorchFile:
    """What one torch file holds: its format, its (data) pickle, and its archive's storages."""

    format: str
    result: ReadResult
    size: int
    storages: dict[str, int] = field(default_factory=dict)


def read_torch_file(name: str, budget: Budget) -> TorchFile:
    """Read the torch file ``name``; raise :class:`CheckpointReadError` for what is not one."""
    with open_regular(name) as fh:
        try:
            size = _size(fh)
            head = fh.read(4)
        except OSError as exc:
            raise CheckpointReadError(f"cannot read: {exc.strerror or exc}") from None
        if head.startswith(ZIP_MAGIC):
            result, storages = _read_zip(fh, size, budget)
            return TorchFile("zip", result, size, storages)
        if not head:
            raise CheckpointReadError("empty file")
        fh.seek(0)
        limit = budget.limits.pickle_bytes
        data = fh.read(limit)
    return _read_stream(data, size, budget)


def _size(fh: BinaryIO) -> int:
    fh.seek(0, 2)
    size = fh.tell()
    fh.seek(0)
    return size


def _read_stream(data: bytes, size: int, budget: Budget) -> TorchFile:
    """A raw pickle (the first one is what ``pickle.load`` runs) or a legacy torch file."""
    try:
        first = read_pickle(data, budget)
    except PickleError as exc:
        _refuse_broken(exc, "the file")
        if size > len(data):
            limit = budget.limits.pickle_bytes
            raise LimitExceeded(f"no complete pickle in the first {limit} bytes", "pickle_bytes", limit) from None
        if data[:1] != b"\x80":
            raise CheckpointReadError(
                f"not a torch checkpoint (neither a zip archive nor a readable pickle: {exc})"
            ) from None
        raise CheckpointReadError(f"not a readable checkpoint: {exc}") from None
    if first.unsafe() or first.value != LEGACY_MAGIC:
        return TorchFile("raw", first, size)
    # Legacy: protocol version, system info, then the data pickle (unpickled by torch.load).
    result, start, uses = first, first.end, list(first.globals)
    try:
        for _ in range(3):
            result = read_pickle(data, budget, start)
            start = result.end
            uses.extend(result.globals)
    except PickleError as exc:
        _refuse_broken(exc, "the legacy file")
    unsafe = sorted({u.ref.dotted for u in uses if not is_allowed(u.ref)})
    message = (
        "legacy (pre-1.6, non-zip) torch checkpoint: not supported by inspect; load it "
        "in a trusted environment and re-save it with torch.save"
    )
    if unsafe:
        message = (
            f"legacy (pre-1.6, non-zip) torch checkpoint whose pickles name {', '.join(unsafe[:10])}: UNSAFE, "
            "torch.load(weights_only=False) or pickle.load would import and run them; do not load it"
        )
    raise CheckpointReadError(message)


def _refuse_broken(exc: PickleError, what: str) -> None:
    """A broken stream that names unsafe globals before it breaks off is refused as unsafe:
    ``pickle.load`` imports (and may call) them before it reaches the break."""
    unsafe = _unsafe_names(exc.globals)
    if unsafe:
        raise CheckpointReadError(
            f"UNSAFE: {what} is a broken pickle that names {', '.join(unsafe[:10])} before it breaks off; "
            f"pickle.load would import and run them first ({exc})"
        ) from None


def _unsafe_names(uses: list[GlobalUse]) -> list[str]:
    return sorted({u.ref.dotted for u in uses if not is_allowed(u.ref)})


def _read_zip(fh: BinaryIO, size: int, budget: Budget) -> tuple[ReadResult, dict[str, int]]:
    limits = budget.limits
    members = count_zip_members(fh, size, limits.entries)
    budget.spend_entries("zip archive members", members)
    try:
        archive = zipfile.ZipFile(fh)
    except zipfile.BadZipFile:
        raise CheckpointReadError(_TRUNCATED) from None
    except Exception as exc:  # zipfile raises many kinds on crafted directories
        raise CheckpointReadError(f"corrupt checkpoint: {type(exc).__name__}: {str(exc)[:200]}") from None
    with archive:
        infos = archive.infolist()
        pickles = [i for i in infos if i.filename.endswith("data.pkl") and i.filename.count("/") == 1]
        if len(pickles) != 1:
            raise CheckpointReadError("zip file is not a torch checkpoint (no <name>/data.pkl)")
        info = pickles[0]
        if info.file_size > limits.pickle_bytes:
            raise LimitExceeded(
                f"data.pkl is {info.file_size} bytes once decompressed", "pickle_bytes", limits.pickle_bytes
            )
        prefix = info.filename[: -len("data.pkl")]
        try:
            with archive.open(info) as member:
                data = member.read(limits.pickle_bytes + 1)
        except Exception as exc:  # bad CRC, truncated member, unsupported compression, encryption ...
            raise CheckpointReadError(f"corrupt checkpoint: {type(exc).__name__}: {str(exc)[:200]}") from None
        if len(data) > limits.pickle_bytes:
            raise LimitExceeded(
                f"data.pkl decompresses to more than {limits.pickle_bytes} bytes", "pickle_bytes", limits.pickle_bytes
            )
        storages = {
            i.filename[len(prefix) + len("data/") :]: i.file_size
            for i in infos
            if i.filename.startswith(prefix + "data/")
        }
    try:
        return read_pickle(data, budget), storages
    except PickleError as exc:
        _refuse_broken(exc, "data.pkl")
        raise CheckpointReadError(f"corrupt checkpoint: {exc}") from None


def count_zip_members(fh: BinaryIO, size: int, limit: int) -> int:
    """How many members the zip's central directory holds, counted without parsing them.

    Refuses (:class:`LimitExceeded`) more than ``limit``; a file without an end-of-directory
    record is the "truncated" error. :mod:`zipfile` parses the directory by its byte size, not
    its declared count, so the members are counted by walking their headers.
    """
    tail_size = min(size, 22 + 65535)
    fh.seek(size - tail_size)
    tail = fh.read(tail_size)
    at = tail.rfind(_EOCD)
    if at < 0 or len(tail) - at < 22:
        raise CheckpointReadError(_TRUNCATED)
    eocd = size - tail_size + at
    (cd_size,) = struct.unpack_from("<L", tail, at + 12)
    cd_end = eocd
    locator = tail[at - 20 : at] if at >= 20 else b""
    if locator[:4] == _EOCD64_LOCATOR:
        (record_at,) = struct.unpack_from("<Q", locator, 8)
        fh.seek(min(record_at, size))
        record = fh.read(56)
        if record[:4] == _EOCD64 and len(record) == 56:
            (cd_size,) = struct.unpack_from("<Q", record, 40)
            cd_end = record_at
    start = cd_end - cd_size
    if start < 0:
        raise CheckpointReadError(_TRUNCATED)
    count = 0
    position = start
    fh.seek(start)
    header = struct.Struct("<4s24xHHH12x")
    while position + 46 <= cd_end:
        fixed = fh.read(46)
        if len(fixed) < 46 or fixed[:4] != _CENTRAL:
            break
        _, name_len, extra_len, comment_len = header.unpack(fixed)
        skip = name_len + extra_len + comment_len
        position += 46 + skip
        fh.seek(skip, 1)
        count += 1
        if count > limit:
            raise LimitExceeded(f"the zip archive has more than {limit} members", "entries", limit)
    return count
