"""TD504 checkpoint-without-rng: No RNG state in the checkpoint, or only part of the state the run actually draws from:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class CheckpointWithoutRng(Rule):
    code = "TD504"
    name = "checkpoint-without-rng"
    severity = Severity.WARNING
    summary = "No RNG state in the checkpoint, or only part of the state the run actually draws from:"
    gpu_only = False
    static = True
    runtime = True
