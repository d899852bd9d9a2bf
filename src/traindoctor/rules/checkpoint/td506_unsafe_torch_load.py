"""TD506 unsafe-torch-load: `torch.load(..., weights_only=False)`:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class UnsafeTorchLoad(Rule):
    code = "TD506"
    name = "unsafe-torch-load"
    severity = Severity.WARNING
    summary = "`torch.load(..., weights_only=False)`:"
    gpu_only = False
    static = True
    runtime = False
