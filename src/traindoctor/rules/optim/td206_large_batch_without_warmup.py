"""TD206 large-batch-without-warmup: The effective batch is large (start from >= 1024) or the LR was scaled up several-fold, and the LR starts at its peak with no warmup."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class LargeBatchWithoutWarmup(Rule):
    code = "TD206"
    name = "large-batch-without-warmup"
    severity = Severity.INFO
    summary = "The effective batch is large (start from >= 1024) or the LR was scaled up several-fold, and the LR starts at its peak with no warmup."
    gpu_only = False
    static = True
    runtime = True
