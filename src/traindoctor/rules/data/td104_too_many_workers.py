"""TD104 too-many-workers: More loader worker processes (summed over loaders that run at the same time, per process) than CPU cores this process may use (`os.sched_getaffinity`), divided by local ranks."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class TooManyWorkers(Rule):
    code = "TD104"
    name = "too-many-workers"
    severity = Severity.WARNING
    summary = "More loader worker processes (summed over loaders that run at the same time, per process) than CPU cores this process may use (`os.sched_getaffinity`), divided by local ranks."
    gpu_only = False
    static = False
    runtime = True
