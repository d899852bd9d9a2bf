"""TD401 cudnn-benchmark-off: A convolutional model runs on CUDA with fixed input shapes and `torch.backends.cudnn.benchmark` is not enabled."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class CudnnBenchmarkOff(Rule):
    code = "TD401"
    name = "cudnn-benchmark-off"
    severity = Severity.INFO
    summary = "A convolutional model runs on CUDA with fixed input shapes and `torch.backends.cudnn.benchmark` is not enabled."
    gpu_only = True
    static = True
    runtime = True
