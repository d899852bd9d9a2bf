"""TD103 workers-respawned: `num_workers > 0` without `persistent_workers=True`, for a loader that is iterated more than once (an epoch loop); a loader consumed once, or through one endless iterator, is fine."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class WorkersRespawned(Rule):
    code = "TD103"
    name = "workers-respawned"
    severity = Severity.WARNING
    summary = "`num_workers > 0` without `persistent_workers=True`, for a loader that is iterated more than once (an epoch loop); a loader consumed once, or through one endless iterator, is fine."
    gpu_only = False
    static = True
    runtime = True
