"""TD304 deprecated-amp-api: `torch.cuda.amp.autocast` / `torch.cuda.amp.GradScaler` (deprecated) instead of `torch.autocast(\"cuda\", ...)` / `torch.amp.GradScaler(\"cuda\")`."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class DeprecatedAmpApi(Rule):
    code = "TD304"
    name = "deprecated-amp-api"
    severity = Severity.INFO
    summary = "`torch.cuda.amp.autocast` / `torch.cuda.amp.GradScaler` (deprecated) instead of `torch.autocast(\"cuda\", ...)` / `torch.amp.GradScaler(\"cuda\")`."
    gpu_only = False
    static = True
    runtime = False
