"""TD205 dead-no-decay-filter: A name-substring \"no decay\" list contains patterns that match no parameter name, e.g."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class DeadNoDecayFilter(Rule):
    code = "TD205"
    name = "dead-no-decay-filter"
    severity = Severity.WARNING
    summary = "A name-substring \"no decay\" list contains patterns that match no parameter name, e.g."
    gpu_only = False
    static = True
    runtime = True
