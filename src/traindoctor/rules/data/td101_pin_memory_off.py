"""TD101 pin-memory-off: A DataLoader feeds a model on a CUDA device without `pin_memory=True`."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class PinMemoryOff(Rule):
    code = "TD101"
    name = "pin-memory-off"
    severity = Severity.WARNING
    summary = "A DataLoader feeds a model on a CUDA device without `pin_memory=True`."
    gpu_only = True
    static = True
    runtime = True
