"""TD601 sampler-set-epoch-missing: A `DistributedSampler` is iterated over several epochs without `sampler.set_epoch(epoch)`:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class SamplerSetEpochMissing(Rule):
    code = "TD601"
    name = "sampler-set-epoch-missing"
    severity = Severity.ERROR
    summary = "A `DistributedSampler` is iterated over several epochs without `sampler.set_epoch(epoch)`:"
    gpu_only = False
    static = True
    runtime = True
