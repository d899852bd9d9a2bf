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


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class WorkersPerRankMonitor(Monitor):
    """Loader workers of all local ranks together vs the machine's cores."""

    rule = WorkersPerRank

    def on_run_end(self) -> None:
        from traindoctor.runtime import loader_evidence as ev

        session = self.session
        local = int(session.local_world_size)
        if local <= 1:
            return
        loaders = ev.loaders_with_workers(session.loaders)
        if not loaders:
            return
        peak_info = max(loaders, key=lambda i: (i.max_concurrent_workers, -i.id))
        per_rank = peak_info.max_concurrent_workers
        cores = int(session.machine_cores)
        if per_rank * local <= cores:
            return
        recommended = max(cores // local - 1, 0)
        self.report(
            f"{local} local ranks x {per_rank} loader workers = {per_rank * local} worker "
            f"processes on a machine with {cores} cores; use at most {recommended} workers per "
            "rank (cores // local ranks - 1).",
            evidence={
                "workers_per_rank": per_rank,
                "local_world_size": local,
                "total_workers": per_rank * local,
                "machine_cores": cores,
                "recommended_num_workers": recommended,
            },
            step=session.step or None,
            **ev.site(peak_info),
        )
