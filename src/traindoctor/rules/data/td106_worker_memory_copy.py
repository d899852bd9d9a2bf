"""TD106 worker-memory-copy: a dataset read by workers holds large Python containers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.records import LoaderInfo


class WorkerMemoryCopy(Rule):
    code = "TD106"
    name = "worker-memory-copy"
    severity = Severity.INFO
    summary = (
        "A map-style Dataset read by worker processes holds a large Python list or dict; store the "
        "data in numpy arrays or tensors so that every worker does not gradually copy it."
    )
    gpu_only = False
    static = False
    runtime = True

    what_it_does = """
    When a DataLoader with `num_workers > 0` first starts its workers, looks at the instance
    attributes of its map-style dataset (and of datasets it wraps, such as `Subset.dataset` or
    `ConcatDataset.datasets`) for Python lists, tuples, dicts and sets with many items, and
    reports the largest with its approximate size. Nothing is reported for numpy arrays or
    tensors, for `IterableDataset`s or for loaders without workers.
    """
    why_bad = """
    On Linux, workers are forked and share the parent's memory copy-on-write. Reading a Python
    object updates its reference count, which writes to the memory page holding it, so as the
    workers index a list of Python objects (file names, label tuples, annotation dicts) each of
    them gradually gets private copies of those pages: memory grows towards one copy of the
    data per worker and looks like a leak. A numpy array or tensor is one object whose data
    buffer reference counting never touches. Under the `spawn` start method (macOS, Windows) the
    dataset is pickled into every worker, a full copy at once.
    """
    example = """
    class Images(Dataset):
        def __init__(self, root):
            self.samples = [(path, label) for path, label in scan(root)]  # millions of tuples

    loader = DataLoader(Images(root), batch_size=64, num_workers=8)
    """
    use_instead = """
    import numpy as np

    class Images(Dataset):
        def __init__(self, root):
            paths, labels = zip(*scan(root))
            self.paths = np.array(paths)  # one fixed-width string array
            self.labels = np.array(labels, dtype=np.int64)
    """
    options = """
    Runtime threshold (`thresholds` in `[tool.traindoctor]`, `--threshold KEY=VALUE` or
    `watch(thresholds=...)`):

    - `TD106.min_items` (default 100000): items a container must hold to be reported.
    """
    references = (
        "https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading",
        "https://github.com/pytorch/pytorch/issues/13246",
    )


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class WorkerMemoryCopyMonitor(Monitor):
    """Inspects a map-style dataset once, when its loader first starts workers."""

    rule = WorkerMemoryCopy

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self._checked: set[int] = set()

    def on_loader_iter_start(self, loader_info: LoaderInfo) -> None:
        from traindoctor.facts.data import runtime as ev

        info = loader_info
        if info.id in self._checked or info.num_workers <= 0 or info.iterable_dataset:
            return
        self._checked.add(info.id)
        dataset = info.dataset
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
            f"{biggest.items:,} objects (~{mib:.0f} MiB), and {info.num_workers} workers read it: "
            "reference counting touches its pages, so each worker gradually copies it; store it as "
            "a numpy array or tensor instead.",
            evidence={
                "containers": [
                    {
                        "attribute": c.path,
                        "type": c.type_name,
                        "items": c.items,
                        "approx_mib": round(c.approx_bytes / 2**20, 1),
                    }
                    for c in found
                ],
                "num_workers": info.num_workers,
                "approx_copied_mib": round(mib * info.num_workers, 1),
            },
            step=self.session.step or None,
            **ev.site(info),
        )
