"""TD301 fp16-without-grad-scaler: A loss computed under float16 autocast (the CUDA default dtype) is backpropagated without a GradScaler:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class Fp16WithoutGradScaler(Rule):
    code = "TD301"
    name = "fp16-without-grad-scaler"
    severity = Severity.ERROR
    summary = "A loss computed under float16 autocast (the CUDA default dtype) is backpropagated without a GradScaler:"
    gpu_only = False
    static = True
    runtime = True
