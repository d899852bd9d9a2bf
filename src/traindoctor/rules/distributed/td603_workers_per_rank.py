"""TD603 workers-per-rank: Loader workers x local ranks exceed the cores of the machine (see TD104; recommended:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class WorkersPerRank(Rule):
    code = "TD603"
    name = "workers-per-rank"
    severity = Severity.WARNING
    summary = "Loader workers x local ranks exceed the cores of the machine (see TD104; recommended:"
    gpu_only = False
    static = False
    runtime = True
