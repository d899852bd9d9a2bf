"""TD202 batchnorm-small-batch: BatchNorm layers normalise over a small per-forward batch (start from < 16), typically because of gradient accumulation or a small per-GPU batch."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class BatchnormSmallBatch(Rule):
    code = "TD202"
    name = "batchnorm-small-batch"
    severity = Severity.WARNING
    summary = "BatchNorm layers normalise over a small per-forward batch (start from < 16), typically because of gradient accumulation or a small per-GPU batch."
    gpu_only = False
    static = True
    runtime = True
