"""TD106 worker-memory-copy: A map-style Dataset holds large Python containers (list/dict of Python objects) and `num_workers > 0`:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class WorkerMemoryCopy(Rule):
    code = "TD106"
    name = "worker-memory-copy"
    severity = Severity.INFO
    summary = "A map-style Dataset holds large Python containers (list/dict of Python objects) and `num_workers > 0`:"
    gpu_only = False
    static = False
    runtime = True
