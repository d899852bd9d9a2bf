"""``ckpt inspect`` for ``torch.distributed.checkpoint`` directories, without unpickling anything.

A DCP checkpoint is a folder: ``.metadata`` (a pickle of DCP's ``Metadata``: every entry's global
shape, dtype and the chunks each rank wrote, and where each chunk lives) and one ``__<rank>_<n>
.distcp`` file per writing rank. ``.metadata`` is read with our own pickle reader, so nothing in it
is imported or run; the ``.distcp`` files are only measured. traindoctor's own sharded checkpoints
add ``traindoctor.json``, ``train_state.pt`` and ``rank_<r>.pt``, which are inspected like any
torch file.

What a resume would lack is judged from the entry names: ``model.*`` weights without optimizer
moments is TD501; ``initial_lr`` in the optimizer's param groups without a scheduler state is
TD502; no RNG stream at all is TD504.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from traindoctor.checkpoint.file_inspect import inspect_file
from traindoctor.checkpoint.inspection import CheckpointReadError, Component, Inspection, resume_gaps
from traindoctor.checkpoint.pickle_reader import (
    Call,
    CallKey,
    Global,
    PickleError,
    TensorInfo,
    read_pickle,
)
from traindoctor.units import format_bytes

_DISTCP = re.compile(r"__(\d+)_(\d+)\.distcp\Z")
_OPT_BUFFERS = ("exp_avg", "exp_avg_sq", "momentum_buffer", "max_exp_avg_sq", "sum", "square_avg", "acc_delta")


def _dtype(props: Any) -> str:
    state = props.state if isinstance(props, Call) else None
    first = (
        state[0] if isinstance(state, tuple) and state else (state.get("dtype") if isinstance(state, dict) else None)
    )
    return first.name if isinstance(first, Global) else "?"


def _size(value: Any) -> tuple[int, ...]:
    if isinstance(value, Call) and isinstance(value.args, tuple) and value.args:
        value = value.args[0]
    if isinstance(value, (tuple, list)) and all(isinstance(d, int) for d in value):
        return tuple(value)
    return ()


def read_metadata(folder: Path) -> dict[str, Any]:
    """The ``Metadata`` object's fields as plain values (entries, storage, ...)."""
    meta = folder / ".metadata"
    if not meta.is_file():
        leftovers = sorted(p.name for p in folder.iterdir())[:6]
        raise CheckpointReadError(
            "incomplete DCP checkpoint: no .metadata (a save that did not finish writes its "
            f"shards but never the index); found {', '.join(leftovers) or 'nothing'}"
        )
    try:
        result = read_pickle(meta.read_bytes())
    except (OSError, PickleError) as exc:
        raise CheckpointReadError(f"corrupt DCP .metadata: {exc}") from None
    root = result.value
    state = root.state if isinstance(root, Call) else None
    if not isinstance(state, dict) or "state_dict_metadata" not in state:
        raise CheckpointReadError(".metadata is not DCP metadata (no state_dict_metadata)")
    return {"state": state, "globals": result.globals}


def inspect_dcp(path: str) -> Inspection:
    """An :class:`~traindoctor.checkpoint.inspection.Inspection` of a DCP directory."""
    from traindoctor.checkpoint import sharded

    folder = Path(path)
    meta = read_metadata(folder)
    state = meta["state"]
    unsafe = [u for u in meta["globals"] if not sharded.metadata_global_allowed(u.ref)]
    entries: dict[str, Any] = state["state_dict_metadata"] or {}
    tensors: list[tuple[str, TensorInfo]] = []
    scalars: list[str] = []
    for fqn, entry in entries.items():
        if isinstance(entry, Call) and entry.label.endswith("TensorStorageMetadata") and isinstance(entry.state, dict):
            chunks = entry.state.get("chunks") or []
            count = len(chunks) if isinstance(chunks, list) else 0
            tensors.append(
                (
                    str(fqn),
                    TensorInfo(
                        dtype=_dtype(entry.state.get("properties")),
                        shape=_size(entry.state.get("size")),
                        storage_key=None,
                        device="?",
                        kind="tensor" if count <= 1 else f"{count} shards",
                    ),
                )
            )
        else:
            scalars.append(str(fqn))
    # What each rank wrote: the storage index says which file holds each chunk.
    per_file: dict[str, dict[str, Any]] = {}
    for key, info in (state.get("storage_data") or {}).items():
        if not (isinstance(info, Call) and isinstance(info.state, dict)):
            continue
        name = str(info.state.get("relative_path"))
        slot = per_file.setdefault(name, {"items": 0, "bytes": 0, "fqns": set()})
        slot["items"] += 1
        slot["bytes"] += int(info.state.get("length") or 0)
        if isinstance(key, CallKey):
            slot["fqns"].add(key.get("fqn"))
    rank_lines = []
    missing_files = []
    for name in sorted(per_file, key=lambda n: (len(n), n)):
        slot = per_file[name]
        match = _DISTCP.match(name)
        who = f"rank {match.group(1)}" if match else name
        exists = (folder / name).is_file()
        if not exists:
            missing_files.append(name)
        rank_lines.append(
            f"{who}: {name}, {slot['items']} item(s), {format_bytes(slot['bytes'])}" + ("" if exists else "  MISSING")
        )
    if missing_files:
        raise CheckpointReadError(
            f"incomplete DCP checkpoint: {', '.join(missing_files)} listed in .metadata but missing"
        )
    # traindoctor's own files in the folder.
    manifest: dict[str, Any] = {}
    try:
        manifest = json.loads((folder / sharded.MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pass
    comps: list[Component] = []
    model_keys = [f for f, _ in tensors if f.startswith("model.")] or [
        f for f, _ in tensors if ".state." not in f and not f.startswith(("optim", "optimizer"))
    ]
    opt_keys = [
        f for f, _ in tensors if f.rsplit(".", 1)[-1] in _OPT_BUFFERS or (".state." in f and f.startswith("optim"))
    ]
    if model_keys:
        values = sum(t.numel for f, t in tensors if f in set(model_keys))
        comps.append(
            Component("model", "model", f"model weights: {len(model_keys)} tensors, {values:,} values (global shapes)")
        )
    if opt_keys:
        comps.append(Component("optimizer", "optimizer", f"optimizer state: {len(opt_keys)} tensors"))
    facts: dict[str, Any] = {
        "cuda_tensors": False,
        "rng": set(),
        "scaler_slots": [],
        "initial_lr": any(f.endswith(".initial_lr") for f in scalars),
    }
    step = manifest.get("step")
    epoch = manifest.get("epoch")
    extra_globals: set[str] = set()
    for name in [sharded.COMMON_FILE] + sorted((p.name for p in folder.glob("rank_*.pt")), key=lambda n: (len(n), n)):
        file = folder / name
        if not file.is_file():
            continue
        sub = inspect_file(str(file))
        unsafe.extend(sub.unsafe)
        extra_globals.update(sub.globals)
        for comp in sub.components:
            if comp.kind in ("model", "optimizer"):
                continue
            comps.append(Component(comp.kind, f"{name}:{comp.path}", comp.summary, comp.details))
            if comp.kind == "rng":
                facts["rng"].add(comp.summary.split(" ")[0].lower())
        step = sub.step if step is None else step
        epoch = sub.epoch if epoch is None else epoch
    saved_world = manifest.get("world_size")
    writers = sorted({int(m.group(1)) for n in per_file if (m := _DISTCP.match(n))})
    if saved_world is not None:
        rank_files = sorted(
            int(p.stem.split("_")[1]) for p in folder.glob("rank_*.pt") if p.stem.split("_")[1].isdigit()
        )
        lacking = [r for r in range(int(saved_world)) if r not in rank_files]
        if lacking:
            rank_lines.append(f"no RNG/loader file for rank(s) {lacking}")
    findings = resume_gaps(str(folder), comps, facts)
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    result = Inspection(
        path=str(folder),
        format="DCP directory (torch.distributed.checkpoint)",
        size_bytes=size,
        root=None,
        unsafe=unsafe,
        globals=sorted({u.ref.dotted for u in meta["globals"]} | extra_globals),
        tensors=tensors,
        components=comps,
        findings=findings,
        step=step,
        epoch=epoch,
    )
    header = [
        f"written by {len(writers)} rank(s)"
        + (f" (world size {saved_world})" if saved_world is not None else "")
        + (", by traindoctor.checkpoint" if manifest else "")
    ]
    result.ranks = header + rank_lines
    result.scalars = scalars
    return result


def is_dcp_dir(path: str | os.PathLike[str]) -> bool:
    p = Path(path)
    return p.is_dir() and ((p / ".metadata").is_file() or any(p.glob("*.distcp")))
