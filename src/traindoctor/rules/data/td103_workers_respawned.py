"""TD103 workers-respawned: `num_workers > 0` without `persistent_workers=True`, for a loader that is iterated more than once (an epoch loop); a loader consumed once, or through one endless iterator, is fine."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class WorkersRespawned(Rule):
    code = "TD103"
    name = "workers-respawned"
    severity = Severity.WARNING
    summary = "`num_workers > 0` without `persistent_workers=True`, for a loader that is iterated more than once (an epoch loop); a loader consumed once, or through one endless iterator, is fine."
    gpu_only = False
    static = True
    runtime = True


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class WorkersRespawnedMonitor(Monitor):
    """Loaders whose worker processes were started again at every epoch, with visible cost."""

    rule = WorkersRespawned

    def on_run_end(self) -> None:
        from traindoctor.runtime import loader_evidence as ev

        min_s = float(self.threshold("min_startup_s", 0.05))
        min_share = float(self.threshold("min_startup_share", 0.05))
        for info in self.session.loaders:
            if info.num_workers <= 0 or info.persistent_workers or info.spawns < 2:
                continue
            # The first start is unavoidable; the later ones are what persistence saves.
            repeated = info.startup_s[1:]
            if not repeated or info.active_s <= 0:
                continue
            steady = ev.loader_timing(info)
            per_batch_s = steady.wait_ms_per_batch / 1000.0
            extra = [max(s - per_batch_s, 0.0) for s in repeated]
            per_epoch = sum(extra) / len(extra)
            share = sum(extra) / info.active_s
            if per_epoch < min_s or share < min_share:
                continue
            self.report(
                f"This DataLoader started its {info.num_workers} worker processes anew in each of "
                f"{info.spawns} epochs, {per_epoch:.2f} s each time ({share:.0%} of its loading "
                "time); pass `persistent_workers=True` to keep the workers between epochs.",
                evidence={
                    "startup_s_per_epoch": round(per_epoch, 4),
                    "startup_share": round(share, 4),
                    "respawns": len(repeated),
                    "epochs": info.epochs,
                    "num_workers": info.num_workers,
                },
                step=self.session.step or None,
                help="Pass `persistent_workers=True`.",
                **ev.site(info),
            )
