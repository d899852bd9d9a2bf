"""verify-resume's result as one plain dictionary (what ``--output-format json`` prints).

The verdict's fields, the run parameters (and the sandbox the runs ran in), and the per-step losses of the three runs (the
uninterrupted reference, the interrupted run, the resumed run) as floats, so a report can draw
where the resumed run leaves the reference. Losses are recorded as exact hex strings; a step
with several backward calls keeps their mean, and a non-finite loss becomes ``null`` (JSON has
no NaN).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any


def _step_losses(record: Mapping[str, Any] | None) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for step, values in sorted(((record or {}).get("losses") or {}).items(), key=lambda kv: int(kv[0])):
        try:
            floats = [float.fromhex(v) for v in values]
        except (TypeError, ValueError):
            continue
        if not floats:
            continue
        mean = sum(floats) / len(floats)
        out[str(step)] = mean if math.isfinite(mean) else None
    return out


def result_dict(
    verdict: Any, runs: Any, *, script: str, steps: int, interrupt_at: int, tolerance: float
) -> dict[str, Any]:
    """The verdict, the run parameters and the three runs' per-step losses."""
    data: dict[str, Any] = verdict.to_dict()
    data.update({"script": script, "steps": steps, "interrupt_at": interrupt_at, "tolerance": tolerance})
    data["sandbox"] = getattr(runs, "sandbox", "")  # the runs' sandbox: landlock, bubblewrap or none
    data["losses"] = {
        name: _step_losses(getattr(getattr(runs, name, None), "record", None))
        for name in ("reference", "interrupted", "resumed")
    }
    return data
