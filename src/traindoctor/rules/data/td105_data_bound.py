"""TD105 data-bound: Workers are in use but the step still waits on data for a significant share of time:"""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class DataBound(Rule):
    code = "TD105"
    name = "data-bound"
    severity = Severity.WARNING
    summary = "Workers are in use but the step still waits on data for a significant share of time:"
    gpu_only = False
    static = False
    runtime = True


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class DataBoundMonitor(Monitor):
    """Loaders with workers whose steady-state data wait is still a real share of the loop."""

    rule = DataBound

    def on_run_end(self) -> None:
        from traindoctor.runtime import loader_evidence as ev

        min_share = float(self.threshold("min_wait_share", 0.2))
        min_ms = float(self.threshold("min_wait_ms", 5.0))
        min_batches = int(self.threshold("min_batches", 5))
        for info in self.session.loaders:
            if info.num_workers <= 0:
                continue
            timing = ev.loader_timing(info)
            if timing.batches < min_batches:
                continue
            if timing.wait_share <= min_share or timing.wait_ms_per_batch <= min_ms:
                continue
            fetch_ms = info.num_workers * (timing.wait_ms_per_batch + timing.compute_ms_per_batch)
            workers = ev.recommended_workers(timing, info.num_workers, self.session)
            evidence = {
                "data_wait_share": round(timing.wait_share, 4),
                "wait_ms_per_batch": round(timing.wait_ms_per_batch, 3),
                "compute_ms_per_batch": round(timing.compute_ms_per_batch, 3),
                "fetch_ms_per_batch_per_worker": round(fetch_ms, 3),
                "batches": timing.batches,
                "num_workers": info.num_workers,
                "worker_budget": ev.worker_budget(self.session),
            }
            if workers > info.num_workers:
                evidence["recommended_num_workers"] = workers
                advice = f"raise `num_workers` to {workers} or make per-sample loading cheaper"
            else:
                advice = (
                    "the workers already use the cores this process has: make per-sample loading "
                    "cheaper (decode less, cache, move augmentation to the GPU)"
                )
            self.report(
                f"With {info.num_workers} workers the loop still waited for data "
                f"{timing.wait_share:.0%} of the time ({timing.wait_ms_per_batch:.1f} ms per batch): "
                f"the input pipeline, not the model, sets the pace; {advice}.",
                evidence=evidence,
                step=self.session.step or None,
                help="`traindoctor tune` measures the best loader settings for this machine.",
                **ev.site(info),
            )
