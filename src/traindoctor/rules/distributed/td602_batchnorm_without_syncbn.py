"""TD602 batchnorm-without-syncbn: DDP with world size > 1, BatchNorm layers, and a small per-rank batch, without SyncBatchNorm."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class BatchnormWithoutSyncbn(Rule):
    code = "TD602"
    name = "batchnorm-without-syncbn"
    severity = Severity.WARNING
    summary = "DDP with world size > 1, BatchNorm layers, and a small per-rank batch, without SyncBatchNorm."
    gpu_only = False
    static = False
    runtime = True
