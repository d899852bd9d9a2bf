"""TD503 checkpoint-without-scaler: A GradScaler exists but its state is not in the checkpoint:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class CheckpointWithoutScaler(Rule):
    code = "TD503"
    name = "checkpoint-without-scaler"
    severity = Severity.ERROR
    summary = "A GradScaler exists but its state is not in the checkpoint:"
    gpu_only = False
    static = True
    runtime = True
