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


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class TooManyWorkersMonitor(Monitor):
    """Peak number of live loader worker processes vs the cores this process may use."""

    rule = TooManyWorkers

    def on_run_end(self) -> None:
        from traindoctor.runtime import loader_evidence as ev

        session = self.session
        loaders = ev.loaders_with_workers(session.loaders)
        if not loaders:
            return
        peak_info = max(loaders, key=lambda i: (i.max_concurrent_workers, -i.id))
        peak = peak_info.max_concurrent_workers
        local = max(int(session.local_world_size), 1)
        if local > 1 and session.cpu_count >= session.machine_cores:
            # All ranks share all cores: TD603 (workers x ranks vs machine cores) says it.
            if peak * local > session.machine_cores:
                return
        allowed = ev.cores_per_rank(session)
        if peak <= allowed:
            return
        concurrent = [i for i in loaders if i.max_concurrent_workers > 0]
        self.report(
            f"{peak} DataLoader worker processes ran at the same time, more than the {allowed} "
            f"CPU cores this process may use; they compete with each other and with the training "
            f"process. Use at most {ev.worker_budget(session)} workers in total.",
            evidence={
                "concurrent_workers": peak,
                "usable_cores": session.cpu_count,
                "local_world_size": local,
                "cores_per_rank": allowed,
                "recommended_total_workers": ev.worker_budget(session),
                "loaders": [
                    f"{i.filename.rsplit('/', 1)[-1]}:{i.row} x{i.num_workers}" if i.row
                    else f"{i.dataset_type} x{i.num_workers}"
                    for i in sorted(concurrent, key=lambda i: i.id)
                ],
            },
            step=session.step or None,
            **ev.site(peak_info),
        )
