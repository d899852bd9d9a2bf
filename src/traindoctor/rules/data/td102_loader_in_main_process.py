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


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class LoaderInMainProcessMonitor(Monitor):
    """Reports a `num_workers=0` loader only when the measured data wait is a real share of the
    loop's time *and* large per batch; cheap in-memory batches stay silent."""

    rule = LoaderInMainProcess

    def on_run_end(self) -> None:
        from traindoctor.runtime import loader_evidence as ev

        min_share = float(self.threshold("min_wait_share", 0.2))
        min_ms = float(self.threshold("min_wait_ms", 5.0))
        min_batches = int(self.threshold("min_batches", 5))
        for info in self.session.loaders:
            if info.num_workers != 0 or info.batches < min_batches:
                continue
            timing = ev.loader_timing(info)
            if timing.wait_share <= min_share or timing.wait_ms_per_batch <= min_ms:
                continue
            workers = ev.recommended_workers(timing, 0, self.session)
            self.report(
                f"The loop waited for data {timing.wait_share:.0%} of the time "
                f"({timing.wait_ms_per_batch:.1f} ms per batch) because this DataLoader loads "
                f"batches in the main process; pass `num_workers={workers}` so worker processes "
                "prepare batches while the model trains.",
                evidence={
                    "data_wait_share": round(timing.wait_share, 4),
                    "wait_ms_per_batch": round(timing.wait_ms_per_batch, 3),
                    "compute_ms_per_batch": round(timing.compute_ms_per_batch, 3),
                    "batches": timing.batches,
                    "num_workers": 0,
                    "recommended_num_workers": workers,
                    "cores_per_rank": ev.cores_per_rank(self.session),
                },
                step=self.session.step or None,
                help=(
                    "An IterableDataset must shard its stream per worker "
                    "(torch.utils.data.get_worker_info())."
                    if info.iterable_dataset
                    else f"Pass `num_workers={workers}` (and `persistent_workers=True`)."
                ),
                **ev.site(info),
            )
