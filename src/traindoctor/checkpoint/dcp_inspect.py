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

import os
import re
from pathlib import Path
from typing import Any

from traindoctor.checkpoint.dcp_metadata import read_manifest, read_metadata
from traindoctor.checkpoint.file_inspect import inspect_file
from traindoctor.checkpoint.files import inside
from traindoctor.checkpoint.inspection import Component, Inspection, resume_gaps
from traindoctor.checkpoint.limits import Budget
from traindoctor.checkpoint.sharded import COMMON_FILE
from traindoctor.units import format_bytes

_DISTCP = re.compile(r"__(\d+)_(\d+)\.distcp\Z")
_RANK_FILE = re.compile(r"rank_(\d+)\.pt\Z")
_OPT_BUFFERS = ("exp_avg", "exp_avg_sq", "momentum_buffer", "max_exp_avg_sq", "sum", "square_avg", "acc_delta")
#: Ranks named one by one when a manifest's world has ranks without their file.
_LACKING_SHOWN = 16


def _lacking_ranks(world: int, present: set[int]) -> str:
    """``[2, 3]``, or the first few and a count: never a list as long as a forged world size."""
    lacking: list[int] = []
    rank = 0
    while rank < world and len(lacking) <= _LACKING_SHOWN:
        if rank not in present:
            lacking.append(rank)
        rank += 1
    if not lacking:
        return ""
    if len(lacking) <= _LACKING_SHOWN:
        return str(lacking)
    total = world - len({r for r in present if r < world})
    return f"{str(lacking[:_LACKING_SHOWN])[:-1]}, ...] ({total} in all)"


def inspect_dcp(path: str, budget: Budget | None = None) -> Inspection:
    """An :class:`~traindoctor.checkpoint.inspection.Inspection` of a DCP directory."""
    budget = budget or Budget()
    folder = Path(path)
    meta = read_metadata(folder, budget)
    unsafe = list(meta.unsafe)
    tensors, scalars = meta.tensors, meta.scalars
    # What each rank wrote: the storage index says which file holds each chunk.
    per_file: dict[str, dict[str, Any]] = {}
    for item in meta.items:
        slot = per_file.setdefault(item.relative_path, {"items": 0, "bytes": 0})
        slot["items"] += 1
        slot["bytes"] += item.length
    rank_lines = []
    for name in sorted(per_file, key=lambda n: (len(n), n)):
        slot = per_file[name]
        match = _DISTCP.match(name)
        who = f"rank {match.group(1)}" if match else name
        rank_lines.append(f"{who}: {name}, {slot['items']} item(s), {format_bytes(slot['bytes'])}")
    # traindoctor's own files in the folder.
    manifest = read_manifest(folder, budget)
    comps: list[Component] = []
    model_keys = [f for f, _ in tensors if f.startswith("model.")] or [
        f for f, _ in tensors if ".state." not in f and not f.startswith(("optim", "optimizer"))
    ]
    opt_keys = [
        f for f, _ in tensors if f.rsplit(".", 1)[-1] in _OPT_BUFFERS or (".state." in f and f.startswith("optim"))
    ]
    if model_keys:
        chosen = set(model_keys)
        values = sum(t.numel for f, t in tensors if f in chosen)
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
    step = manifest.step if manifest else None
    epoch = manifest.epoch if manifest else None
    extra_globals: set[str] = set()
    listing = _listing(folder, budget)
    ranks = {int(m.group(1)): n for n in listing if (m := _RANK_FILE.match(n))}
    for name in [COMMON_FILE] + [ranks[r] for r in sorted(ranks)]:
        if name not in listing:
            continue
        sub = inspect_file(str(inside(folder, name, name)), budget)
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
    saved_world = manifest.world_size if manifest else None
    writers = sorted({int(m.group(1)) for n in per_file if (m := _DISTCP.match(n))})
    if saved_world is not None:
        lacking = _lacking_ranks(saved_world, set(ranks))
        if lacking:
            rank_lines.append(f"no RNG/loader file for rank(s) {lacking}")
    findings = resume_gaps(str(folder), comps, facts)
    result = Inspection(
        path=str(folder),
        format="DCP directory (torch.distributed.checkpoint)",
        size_bytes=sum(listing.values()),
        root=None,
        unsafe=unsafe,
        globals=sorted({u.ref.dotted for u in meta.globals} | extra_globals),
        tensors=tensors,
        components=comps,
        findings=findings,
        step=step,
        epoch=epoch,
    )
    header = [
        f"written by {len(writers)} rank(s)"
        + (f" (world size {saved_world})" if saved_world is not None else "")
        + (", by traindoctor.checkpoint" if manifest and manifest.raw else "")
    ]
    result.ranks = header + rank_lines
    result.scalars = scalars
    return result


def _listing(folder: Path, budget: Budget) -> dict[str, int]:
    """The regular files directly in ``folder`` (not following symlinks) and their sizes."""
    found: dict[str, int] = {}
    with os.scandir(folder) as entries:
        for entry in entries:
            budget.spend_entries("files in the checkpoint folder")
            try:
                if entry.is_file(follow_symlinks=False):
                    found[entry.name] = entry.stat(follow_symlinks=False).st_size
                elif entry.is_symlink() and entry.is_file():
                    found[entry.name] = 0
            except OSError:
                continue
    return found


def is_dcp_dir(path: str | os.PathLike[str]) -> bool:
    p = Path(path)
    return p.is_dir() and ((p / ".metadata").is_file() or any(p.glob("*.distcp")))
