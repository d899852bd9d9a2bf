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


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class WorkerMemoryCopyMonitor(Monitor):
    """Inspects a map-style dataset once, when its loader first starts workers."""

    rule = WorkerMemoryCopy

    def __init__(self, session: object) -> None:
        super().__init__(session)
        self._checked: set[int] = set()

    def on_loader_iter_start(self, loader_info: object) -> None:
        from traindoctor.runtime import loader_evidence as ev

        info = loader_info
        if info.id in self._checked or info.num_workers <= 0 or info.iterable_dataset:  # type: ignore[attr-defined]
            return
        self._checked.add(info.id)  # type: ignore[attr-defined]
        dataset = info.dataset  # type: ignore[attr-defined]
        if dataset is None:
            return
        min_items = int(self.threshold("min_items", 100_000))
        found = ev.large_containers(dataset, min_items)
        if not found:
            return
        biggest = max(found, key=lambda c: (c.approx_bytes, c.path))
        mib = biggest.approx_bytes / 2**20
        self.report(
            f"The dataset holds `{biggest.path}`, a Python {biggest.type_name} of "
            f"{biggest.items:,} objects (~{mib:.0f} MiB), and {info.num_workers} workers read it: "  # type: ignore[attr-defined]
            "reference counting touches its pages, so each worker gradually copies it; store it as "
            "a numpy array or tensor instead.",
            evidence={
                "containers": [
                    {"attribute": c.path, "type": c.type_name, "items": c.items,
                     "approx_mib": round(c.approx_bytes / 2**20, 1)}
                    for c in found
                ],
                "num_workers": info.num_workers,  # type: ignore[attr-defined]
                "approx_copied_mib": round(mib * info.num_workers, 1),  # type: ignore[attr-defined]
            },
            step=self.session.step or None,
            **ev.site(info),
        )
