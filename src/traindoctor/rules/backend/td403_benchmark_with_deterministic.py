"""TD403 benchmark-with-deterministic: `cudnn.benchmark` and `cudnn.deterministic` both True:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class BenchmarkWithDeterministic(Rule):
    code = "TD403"
    name = "benchmark-with-deterministic"
    severity = Severity.WARNING
    summary = "`cudnn.benchmark` and `cudnn.deterministic` both True:"
    gpu_only = False
    static = True
    runtime = True
