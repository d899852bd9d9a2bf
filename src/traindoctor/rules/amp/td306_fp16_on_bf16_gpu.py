"""TD306 fp16-on-bf16-gpu: float16 autocast on a GPU that supports bfloat16 (compute capability >= 8.0):"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class Fp16OnBf16Gpu(Rule):
    code = "TD306"
    name = "fp16-on-bf16-gpu"
    severity = Severity.INFO
    summary = "float16 autocast on a GPU that supports bfloat16 (compute capability >= 8.0):"
    gpu_only = True
    static = False
    runtime = True
