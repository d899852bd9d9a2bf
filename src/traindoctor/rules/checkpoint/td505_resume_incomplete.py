"""TD505 resume-incomplete: The resume path restores the model but not the optimizer/scheduler/scaler state that the same file saves."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class ResumeIncomplete(Rule):
    code = "TD505"
    name = "resume-incomplete"
    severity = Severity.ERROR
    summary = "The resume path restores the model but not the optimizer/scheduler/scaler state that the same file saves."
    gpu_only = False
    static = True
    runtime = False
