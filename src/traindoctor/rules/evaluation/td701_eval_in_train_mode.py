"""TD701 eval-in-train-mode: A model with BatchNorm or Dropout is run for evaluation (under `no_grad`/`inference_mode`, no backward) while still in training mode:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class EvalInTrainMode(Rule):
    code = "TD701"
    name = "eval-in-train-mode"
    severity = Severity.ERROR
    summary = "A model with BatchNorm or Dropout is run for evaluation (under `no_grad`/`inference_mode`, no backward) while still in training mode:"
    gpu_only = False
    static = True
    runtime = True
