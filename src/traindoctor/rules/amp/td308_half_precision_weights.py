"""TD308 half-precision-weights: The model itself is cast to float16 (`model.half()`, `.to(torch.float16)`) and trained:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class HalfPrecisionWeights(Rule):
    code = "TD308"
    name = "half-precision-weights"
    severity = Severity.WARNING
    summary = "The model itself is cast to float16 (`model.half()`, `.to(torch.float16)`) and trained:"
    gpu_only = False
    static = True
    runtime = True
