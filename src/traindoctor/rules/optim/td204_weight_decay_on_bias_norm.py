"""TD204 weight-decay-on-bias-norm: Weight decay applies to biases or normalisation parameters (BatchNorm/LayerNorm/GroupNorm/RMSNorm gains and shifts)."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class WeightDecayOnBiasNorm(Rule):
    code = "TD204"
    name = "weight-decay-on-bias-norm"
    severity = Severity.WARNING
    summary = "Weight decay applies to biases or normalisation parameters (BatchNorm/LayerNorm/GroupNorm/RMSNorm gains and shifts)."
    gpu_only = False
    static = True
    runtime = True
