"""TD702 eval-with-grad: Evaluation forward passes (model in eval mode, no backward follows) run with autograd recording:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class EvalWithGrad(Rule):
    code = "TD702"
    name = "eval-with-grad"
    severity = Severity.WARNING
    summary = "Evaluation forward passes (model in eval mode, no backward follows) run with autograd recording:"
    gpu_only = False
    static = True
    runtime = True
