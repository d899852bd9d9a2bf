"""TD402 cudnn-benchmark-variable-shapes: `cudnn.benchmark=True` but conv inputs keep changing shape:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class CudnnBenchmarkVariableShapes(Rule):
    code = "TD402"
    name = "cudnn-benchmark-variable-shapes"
    severity = Severity.WARNING
    summary = "`cudnn.benchmark=True` but conv inputs keep changing shape:"
    gpu_only = True
    static = False
    runtime = True
