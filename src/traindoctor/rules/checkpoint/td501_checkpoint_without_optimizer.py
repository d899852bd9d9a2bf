"""TD501 checkpoint-without-optimizer: A training checkpoint holds model weights but no optimizer state while an optimizer exists (including `torch.save(model.state_dict(), ...)`)."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class CheckpointWithoutOptimizer(Rule):
    code = "TD501"
    name = "checkpoint-without-optimizer"
    severity = Severity.ERROR
    summary = "A training checkpoint holds model weights but no optimizer state while an optimizer exists (including `torch.save(model.state_dict(), ...)`)."
    gpu_only = False
    static = True
    runtime = True
