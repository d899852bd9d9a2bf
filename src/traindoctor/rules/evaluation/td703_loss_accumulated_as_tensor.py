"""TD703 loss-accumulated-as-tensor: `total += loss` (a tensor attached to the graph) instead of `loss.item()`/`loss.detach()`:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class LossAccumulatedAsTensor(Rule):
    code = "TD703"
    name = "loss-accumulated-as-tensor"
    severity = Severity.WARNING
    summary = "`total += loss` (a tensor attached to the graph) instead of `loss.item()`/`loss.detach()`:"
    gpu_only = False
    static = True
    runtime = False
