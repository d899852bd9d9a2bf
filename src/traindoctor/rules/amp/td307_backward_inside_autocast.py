"""TD307 backward-inside-autocast: `.backward()` inside the autocast region; PyTorch recommends leaving the region before backward."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class BackwardInsideAutocast(Rule):
    code = "TD307"
    name = "backward-inside-autocast"
    severity = Severity.INFO
    summary = "`.backward()` inside the autocast region; PyTorch recommends leaving the region before backward."
    gpu_only = False
    static = True
    runtime = False
