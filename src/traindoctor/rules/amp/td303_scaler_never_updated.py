"""TD303 scaler-never-updated: `scaler.step()` with no `scaler.update()`:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class ScalerNeverUpdated(Rule):
    code = "TD303"
    name = "scaler-never-updated"
    severity = Severity.ERROR
    summary = "`scaler.step()` with no `scaler.update()`:"
    gpu_only = False
    static = True
    runtime = False
