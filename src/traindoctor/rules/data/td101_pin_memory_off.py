"""TD101 pin-memory-off: A DataLoader feeds a model on a CUDA device without `pin_memory=True`."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class PinMemoryOff(Rule):
    code = "TD101"
    name = "pin-memory-off"
    severity = Severity.WARNING
    summary = "A DataLoader feeds a model on a CUDA device without `pin_memory=True`."
    gpu_only = True
    static = True
    runtime = True


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class PinMemoryOffMonitor(Monitor):
    """Batches of a `pin_memory=False` loader copied to CUDA (GPU-only: the session drops this
    finding unless the run used CUDA)."""

    rule = PinMemoryOff

    def __init__(self, session: object) -> None:
        super().__init__(session)
        self._copies: dict[int, list[float]] = {}
        self._infos: dict[int, object] = {}

    def on_transfer(
        self, nbytes: int, seconds: float, pinned: bool, device_type: str, loader_info: object = None
    ) -> None:
        if device_type != "cuda" or pinned or loader_info is None or loader_info.pin_memory:  # type: ignore[attr-defined]
            return
        key = loader_info.id  # type: ignore[attr-defined]
        stats = self._copies.get(key)
        if stats is None:
            stats = self._copies[key] = [0.0, 0.0, 0.0]
            self._infos[key] = loader_info
        stats[0] += 1
        stats[1] += seconds
        stats[2] += nbytes

    def on_run_end(self) -> None:
        from traindoctor.runtime import loader_evidence as ev

        min_copies = int(self.threshold("min_copies", 3))
        min_share = float(self.threshold("min_transfer_share", 0.01))
        records = self.session.records
        total = sum(r.wall_s for r in records) if records else (
            self.session.ended_at - self.session.started_at
        )
        for key in sorted(self._copies):
            count, seconds, nbytes = self._copies[key]
            share = seconds / total if total > 0 else 0.0
            if count < min_copies or share < min_share:
                continue
            info = self._infos[key]
            self.report(
                f"Batches from this DataLoader (`pin_memory=False`) were copied to the GPU from "
                f"pageable memory, {share:.0%} of the run's step time; pass `pin_memory=True` and "
                "move batches with `.to(device, non_blocking=True)` so copies overlap with compute.",
                evidence={
                    "transfer_share": round(share, 4),
                    "copies": int(count),
                    "ms_per_copy": round(1000.0 * seconds / count, 3),
                    "mib_per_copy": round(nbytes / count / 2**20, 3),
                },
                step=self.session.step or None,
                help="Pass `pin_memory=True`.",
                **ev.site(info),
            )
