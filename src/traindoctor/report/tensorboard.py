"""``traindoctor run --tensorboard DIR``: the profile's per-step scalars as TensorBoard events.

Written once at the end of the run (never on the training hot path) with
``torch.utils.tensorboard.SummaryWriter``, from the full-resolution timeline
(:func:`traindoctor.runtime.timeline.build_timeline`): per-step milliseconds of every component,
samples/s and memory, at ``global_step`` = the optimizer step. TensorBoard is optional;
:func:`missing_dependency` lets the command say so before the run starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

MISSING_TENSORBOARD = (
    "--tensorboard needs the tensorboard package: pip install tensorboard "
    "(with your torch pinned, e.g. -c constraints.txt)"
)
#: Tag prefix of every scalar, so the doctor's curves sit apart from the script's own.
PREFIX = "traindoctor"
_LABELS = {"data": "data_wait", "wall": "step"}


def missing_dependency() -> str | None:
    """``None`` when events can be written, else the message telling how to enable them."""
    import importlib.util

    try:
        found = importlib.util.find_spec("tensorboard") is not None
    except (ImportError, ValueError):
        found = False
    return None if found else MISSING_TENSORBOARD


def scalars(point: Mapping[str, Any]) -> dict[str, float]:
    """The scalars of one timeline point, by tag."""
    out: dict[str, float] = {}
    for key, value in point.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if key.endswith("_ms"):
            name = key[:-3]
            out[f"{PREFIX}/step_ms/{_LABELS.get(name, name)}"] = float(value)
        elif key == "samples_per_s":
            out[f"{PREFIX}/throughput/samples_per_s"] = float(value)
        elif key.endswith("_bytes"):
            out[f"{PREFIX}/memory_mib/{key[:-6]}"] = float(value) / 2**20
    return out


def write_events(timeline: Sequence[Mapping[str, Any]], logdir: str, profile: Mapping[str, Any] | None = None) -> int:
    """Write one event per scalar per step into ``logdir``; returns the number of scalars."""
    from torch.utils.tensorboard import SummaryWriter

    written = 0
    writer = SummaryWriter(log_dir=logdir)
    try:
        for point in timeline:
            step = int(point["step"])
            for tag, value in scalars(point).items():
                writer.add_scalar(tag, value, global_step=step)
                written += 1
        if profile and profile.get("verdict"):
            writer.add_text(f"{PREFIX}/verdict", f"{profile['verdict']}: {profile.get('reason', '')}")
    finally:
        writer.close()
    return written
