"""A DCP directory's ``.metadata`` and traindoctor's ``traindoctor.json``, checked before any use.

DCP (``torch.distributed.checkpoint``) reads ``.metadata`` with ``pickle.load`` and then opens
every shard file it names, at the offsets it names. Both are data from the checkpoint, so
:func:`read_metadata` reads ``.metadata`` with traindoctor's own pickle reader (nothing is imported
or run), lists the globals outside DCP's metadata classes, and checks every field it relies on:
entry names, tensor shapes, and for each stored item a shard path inside the folder (no absolute
path, no ``..`` or symlink out), naming a regular file, with ``offset + length`` within it.
:func:`read_manifest` checks ``traindoctor.json`` the same way (an object, a plausible
``world_size``, whole-number ``step``/``epoch``). Every problem is a
:class:`~traindoctor.checkpoint.inspection.CheckpointReadError` with a message, never an
allocation sized by the file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindoctor.checkpoint.allowlist import dcp_metadata_allowed
from traindoctor.checkpoint.files import inside, read_limited
from traindoctor.checkpoint.inspection import CheckpointReadError
from traindoctor.checkpoint.limits import Budget
from traindoctor.checkpoint.pickle_reader import PickleError, read_pickle
from traindoctor.checkpoint.pickle_values import MAX_NUMEL, Call, CallKey, Global, GlobalUse, TensorInfo, describe

METADATA = ".metadata"
MANIFEST = "traindoctor.json"
#: The largest ``world_size`` a manifest may state.
MAX_WORLD_SIZE = 1 << 20


@dataclass
class StoredItem:
    """Where DCP finds one saved item: ``length`` bytes at ``offset`` of shard ``relative_path``."""

    fqn: str
    relative_path: str
    offset: int
    length: int


@dataclass
class DcpMetadata:
    """What ``.metadata`` says, checked: its entries, where each item is stored, its globals."""

    #: The stream as read (``load`` unpickles exactly these bytes once they are checked).
    data: bytes
    globals: list[GlobalUse]
    #: Globals outside DCP's metadata classes and torch's weights_only allowlist.
    unsafe: list[GlobalUse]
    tensors: list[tuple[str, TensorInfo]] = field(default_factory=list)
    #: Non-tensor entries (optimizer hyperparameters ...).
    scalars: list[str] = field(default_factory=list)
    items: list[StoredItem] = field(default_factory=list)


def _fields(value: Any) -> dict[Any, Any] | None:
    """The attributes of a pickled dataclass instance (its BUILD state), None when it has none."""
    state = value.state if isinstance(value, Call) else None
    return state if isinstance(state, dict) else None


def _dtype(props: Any) -> str:
    state = props.state if isinstance(props, Call) else None
    first = (
        state[0] if isinstance(state, tuple) and state else (state.get("dtype") if isinstance(state, dict) else None)
    )
    return first.name[:40] if isinstance(first, Global) else "?"


def _shape(value: Any, fqn: str) -> tuple[int, ...]:
    if isinstance(value, Call) and isinstance(value.args, tuple) and value.args:
        value = value.args[0]
    if value is None:
        return ()
    if not isinstance(value, (tuple, list)) or len(value) > 64:
        raise CheckpointReadError(f"refused: .metadata entry {fqn}: its size is not a tensor shape")
    total = 1
    for dim in value:
        if not _whole(dim, MAX_NUMEL):
            raise CheckpointReadError(f"refused: .metadata entry {fqn}: size {describe(dim)} is not a dimension")
        total *= dim
        if total > MAX_NUMEL:
            raise CheckpointReadError(f"refused: .metadata entry {fqn}: more than 2**63 elements")
    return tuple(value)


def _whole(value: Any, largest: int) -> bool:
    """A whole number from 0 to ``largest`` (bools are not numbers here)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= largest


def read_metadata(folder: Path, budget: Budget) -> DcpMetadata:
    """``folder``'s ``.metadata``, read without unpickling and checked field by field."""
    meta = folder / METADATA
    if not meta.exists():
        leftovers = sorted(p.name for p in folder.iterdir())[:6]
        raise CheckpointReadError(
            "incomplete DCP checkpoint: no .metadata (a save that did not finish writes its "
            f"shards but never the index); found {', '.join(leftovers) or 'nothing'}"
        )
    data = read_limited(meta, budget.limits.pickle_bytes, ".metadata")
    try:
        result = read_pickle(data, budget)
    except PickleError as exc:
        bad = sorted({u.ref.dotted for u in exc.globals if not dcp_metadata_allowed(u.ref)})
        named = f"; before it breaks off it references {', '.join(bad[:10])}" if bad else ""
        raise CheckpointReadError(f"corrupt DCP .metadata: {exc}{named}") from None
    unsafe = [u for u in result.globals if not dcp_metadata_allowed(u.ref)]
    state = _fields(result.value)
    if state is None or "state_dict_metadata" not in state:
        names = sorted({u.ref.dotted for u in unsafe})
        named = f"; it references {', '.join(names[:10])}" if names else ""
        raise CheckpointReadError(f".metadata is not DCP metadata (no state_dict_metadata){named}")
    found = DcpMetadata(data=data, globals=result.globals, unsafe=unsafe)
    _read_entries(state.get("state_dict_metadata"), found, budget)
    _read_storage(folder, state.get("storage_data"), found, budget)
    return found


def _read_entries(entries: Any, found: DcpMetadata, budget: Budget) -> None:
    if entries is None:
        return
    if not isinstance(entries, dict):
        raise CheckpointReadError("refused: .metadata's state_dict_metadata is not a dict")
    budget.spend_entries("DCP index entries", len(entries))
    for fqn, entry in entries.items():
        name = fqn if isinstance(fqn, str) else describe(fqn)
        props = _fields(entry)
        if isinstance(entry, Call) and entry.label.endswith("TensorStorageMetadata") and props is not None:
            chunks = props.get("chunks") or []
            count = len(chunks) if isinstance(chunks, list) else 0
            info = TensorInfo(
                dtype=_dtype(props.get("properties")),
                shape=_shape(props.get("size"), name),
                storage_key=None,
                device="?",
                kind="tensor" if count <= 1 else f"{count} shards",
            )
            found.tensors.append((name, info))
        else:
            found.scalars.append(name)


def _read_storage(folder: Path, storage: Any, found: DcpMetadata, budget: Budget) -> None:
    """Every stored item's shard, checked: inside ``folder``, a regular file, the range within it."""
    if storage is None:
        return
    if not isinstance(storage, dict):
        raise CheckpointReadError("refused: .metadata's storage_data is not a dict")
    budget.spend_entries("DCP index entries", len(storage))
    sizes: dict[str, int] = {}
    for key, info in storage.items():
        fqn = key.get("fqn") if isinstance(key, CallKey) else None
        fqn = fqn if isinstance(fqn, str) else describe(key)
        where = _fields(info)
        if where is None:
            continue
        relative = where.get("relative_path")
        offset, length = where.get("offset", 0), where.get("length", 0)
        for name, value in (("offset", offset), ("length", length)):
            if not _whole(value, MAX_NUMEL):
                raise CheckpointReadError(
                    f"refused: .metadata: the {name} of {fqn} is {describe(value)}, not a byte count"
                )
        if not isinstance(relative, str):
            raise CheckpointReadError(f"refused: .metadata's shard for {fqn[:100]} is not a file name")
        if relative not in sizes:
            target = inside(folder, relative, f".metadata's shard for {fqn[:100]}")
            try:
                sizes[relative] = target.stat().st_size if target.is_file() else -1
            except OSError:
                sizes[relative] = -1
        size = sizes[relative]
        if size >= 0 and offset + length > size:
            raise CheckpointReadError(
                f"refused: .metadata places {fqn} at bytes {offset}..{offset + length} of {relative}, "
                f"which has {size} bytes"
            )
        found.items.append(StoredItem(fqn, relative, offset, length))
    missing = sorted((name for name, size in sizes.items() if size < 0), key=lambda n: (len(n), n))
    if missing:
        raise CheckpointReadError(
            f"incomplete DCP checkpoint: {', '.join(missing[:10])} listed in .metadata but missing"
        )


@dataclass
class Manifest:
    """``traindoctor.json``, checked: what traindoctor wrote beside DCP's files."""

    raw: dict[str, Any]
    world_size: int | None = None
    step: int | None = None
    epoch: int | None = None


def read_manifest(folder: Path, budget: Budget) -> Manifest | None:
    """``folder``'s ``traindoctor.json``; None when there is none (a DCP folder of another writer)."""
    path = folder / MANIFEST
    if not os.path.lexists(path):
        return None
    inside(folder, MANIFEST, MANIFEST)
    data = read_limited(path, budget.limits.pickle_bytes, MANIFEST)
    try:
        raw = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        raise CheckpointReadError(f"refused: {MANIFEST} is not valid JSON ({str(exc)[:120]})") from None
    if not isinstance(raw, dict):
        raise CheckpointReadError(f"refused: {MANIFEST} is not a JSON object (a {type(raw).__name__})")
    manifest = Manifest(raw)
    world = raw.get("world_size")
    if world is not None:
        if not _whole(world, MAX_WORLD_SIZE) or world < 1:
            raise CheckpointReadError(
                f"refused: {MANIFEST} gives world_size {describe(world)}: not a world size "
                f"(a whole number from 1 to {MAX_WORLD_SIZE})"
            )
        manifest.world_size = world
    for name in ("step", "epoch"):
        value = raw.get(name)
        if value is not None and not _whole(value, MAX_NUMEL):
            raise CheckpointReadError(f"refused: {MANIFEST} gives {name} {describe(value)}: not a whole number")
        setattr(manifest, name, value)
    return manifest
