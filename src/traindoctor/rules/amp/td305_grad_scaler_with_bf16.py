"""TD305 grad-scaler-with-bf16: A GradScaler is used while autocast runs in bfloat16:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class GradScalerWithBf16(Rule):
    code = "TD305"
    name = "grad-scaler-with-bf16"
    severity = Severity.INFO
    summary = "A GradScaler is used while autocast runs in bfloat16:"
    gpu_only = False
    static = True
    runtime = True
