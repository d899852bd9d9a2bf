"""TD302 clip-before-unscale: Gradients are clipped (`clip_grad_norm_`/`clip_grad_value_`) while still multiplied by the loss scale, i.e."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class ClipBeforeUnscale(Rule):
    code = "TD302"
    name = "clip-before-unscale"
    severity = Severity.ERROR
    summary = "Gradients are clipped (`clip_grad_norm_`/`clip_grad_value_`) while still multiplied by the loss scale, i.e."
    gpu_only = False
    static = True
    runtime = True
