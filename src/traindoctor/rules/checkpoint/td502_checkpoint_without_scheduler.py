"""TD502 checkpoint-without-scheduler: An LR scheduler exists but its state is not in the checkpoint."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class CheckpointWithoutScheduler(Rule):
    code = "TD502"
    name = "checkpoint-without-scheduler"
    severity = Severity.ERROR
    summary = "An LR scheduler exists but its state is not in the checkpoint."
    gpu_only = False
    static = True
    runtime = True
