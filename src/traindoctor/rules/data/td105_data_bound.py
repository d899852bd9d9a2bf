"""TD105 data-bound: Workers are in use but the step still waits on data for a significant share of time:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class DataBound(Rule):
    code = "TD105"
    name = "data-bound"
    severity = Severity.WARNING
    summary = "Workers are in use but the step still waits on data for a significant share of time:"
    gpu_only = False
    static = False
    runtime = True
