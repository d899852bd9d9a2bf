"""TD203 lr-not-scaled: S:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class LrNotScaled(Rule):
    code = "TD203"
    name = "lr-not-scaled"
    severity = Severity.WARNING
    summary = "S:"
    gpu_only = False
    static = True
    runtime = True
