"""TD102 loader-in-main-process: S:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class LoaderInMainProcess(Rule):
    code = "TD102"
    name = "loader-in-main-process"
    severity = Severity.WARNING
    summary = "S:"
    gpu_only = False
    static = True
    runtime = True
