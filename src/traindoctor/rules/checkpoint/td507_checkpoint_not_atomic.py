"""TD507 checkpoint-not-atomic: `torch.save` straight onto the path that resume reads (e.g."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class CheckpointNotAtomic(Rule):
    code = "TD507"
    name = "checkpoint-not-atomic"
    severity = Severity.INFO
    summary = "`torch.save` straight onto the path that resume reads (e.g."
    gpu_only = False
    static = True
    runtime = False
