"""Numbers the data-loading monitors (TD101-TD106, TD603) judge from. Never imports torch.

The dataloader probe keeps raw counters on each
:class:`~traindoctor.runtime.records.LoaderInfo`; this module turns them into the evidence the
rules report, so every rule computes "data-wait share" the same way.

* *wait*: time the loop spent inside ``next(iterator)`` for this loader.
* *active time*: from ``iter(loader)`` to the last batch of each epoch, summed over epochs.
* *compute per batch*: ``(active - wait) / batches``: what the loop did with each batch.
* For loaders with workers, the first batch of each epoch is excluded from the steady numbers
  (it pays worker start-up, which TD103 judges separately).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterable
from typing import Any

from traindoctor.machine import cpu_snapshot, load_average, others_cores
from traindoctor.runtime.live import fields_repr


class LoaderTiming:
    """Steady-state data-wait numbers of one loader."""

    __slots__ = ("active_s", "batches", "wait_s")

    batches: int
    wait_s: float
    active_s: float

    def __init__(self, batches: int, wait_s: float, active_s: float) -> None:
        self.batches = batches
        self.wait_s = wait_s
        self.active_s = active_s

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    @property
    def wait_share(self) -> float:
        return self.wait_s / self.active_s if self.active_s > 0 else 0.0

    @property
    def wait_ms_per_batch(self) -> float:
        return 1000.0 * self.wait_s / self.batches if self.batches else 0.0

    @property
    def compute_ms_per_batch(self) -> float:
        if not self.batches:
            return 0.0
        return 1000.0 * max(self.active_s - self.wait_s, 0.0) / self.batches


def loader_timing(info: Any) -> LoaderTiming:
    """Steady-state timing of a loader (see the module docstring)."""
    if info.num_workers > 0:
        return LoaderTiming(
            batches=info.steady_batches,
            wait_s=max(info.steady_wait_s, 0.0),
            active_s=max(info.active_s - info.first_wait_s, 0.0),
        )
    return LoaderTiming(batches=info.batches, wait_s=info.wait_s, active_s=info.active_s)


def epoch_period_s(session: Any, info: Any) -> float:
    """Seconds of one epoch of the training loop, for judging a cost paid once per pass of
    ``info``: the mean time between the epoch starts of the training loader that ran the most
    epochs (an evaluation pass inside the epoch counts within it); without one that ran twice,
    ``info``'s own time per pass."""
    train = _epoch_loader(session)
    if train is not None and train.last_start > train.first_start:
        span: float = train.last_start - train.first_start
        return span / int(train.epochs - 1)
    active: float = info.active_s
    return active / max(int(info.epochs), 1)


def passes_per_epoch(session: Any, info: Any) -> float:
    """How many times ``info`` is iterated per epoch of the training loop (1.0 without one)."""
    train = _epoch_loader(session)
    if train is None or info.feeds_training:
        return 1.0
    return int(info.epochs) / int(train.epochs)


def _epoch_loader(session: Any) -> Any:
    """The training loader that ran the most epochs (two at least): the loop's epoch clock."""
    runs = [i for i in session.loaders if i.feeds_training and i.epochs >= 2]
    return max(runs, key=lambda i: (i.epochs, -i.id)) if runs else None


def worker_budget(session: Any, info: Any = None) -> int:
    """Loader workers one process can keep busy: the pipeline model's ceiling
    (:func:`~traindoctor.facts.data.pipeline.worker_ceiling`, the one tune keeps to) of its cores
    (shared between the local ranks when they all may run on every core), measured on the
    training loader ``info`` (by default the training loader with the most batches): how much of
    a batch's CPU the training process needs, and how busy its workers kept their cores. Without
    a measured loader: the cores minus one (the training process's)."""
    from traindoctor.facts.data.pipeline import worker_ceiling

    if info is None or not getattr(info, "feeds_training", False) or not info.batches:
        training = [i for i in session.training_loaders() if i.batches]
        info = max(training, key=lambda i: (i.batches, -i.id)) if training else None
    if info is not None:
        timing = loader_timing(info)
        if timing.batches:
            return int(pipeline(timing, info, session).ceiling)
    return worker_ceiling(cores_per_rank(session))


def cores_per_rank(session: Any) -> int:
    """Cores this process may use. Under torchrun without CPU binding every rank may use every
    core, so the machine's cores are shared by the local ranks; with binding (the affinity is
    already smaller than the machine), the affinity is this rank's share."""
    cores = int(session.cpu_count)
    local = max(int(session.local_world_size), 1)
    if local > 1 and cores >= int(session.machine_cores):
        return max(cores // local, 1)
    return max(cores, 1)


def load_elsewhere(session: Any, own: int) -> float | None:
    """The cores other programs kept busy during the run, or None where unknown. Uneven steps on
    a machine that other programs keep busy tell nothing about this run's own split of the cores.

    Measured as the machine's CPU time since the watch started less that of this process and its
    workers (:func:`traindoctor.machine.others_cores`). Where that cannot be read (not Linux, or
    several local ranks, whose siblings are not this process's children), the 1-minute load
    average beyond ``own`` (the runnable threads and processes this run itself accounts for)."""
    local = max(int(session.local_world_size), 1)
    start = getattr(session, "cpu_at_start", None)
    if start is not None and local == 1:
        others = others_cores(start, cpu_snapshot())
        if others is not None:
            return others
    load = load_average()
    if load is None:
        return None
    now = max(0.0, load - own * local)
    # A 1-minute average moves slowly: at the end of a short run it holds little of the run's
    # own threads, so subtracting them all hides other programs' load. The load before the run
    # started (:attr:`Session.load_at_start`) is other programs' alone.
    before = getattr(session, "load_at_start", None)
    return max(now, float(before)) if isinstance(before, (int, float)) else now


def compute_spread(session: Any) -> tuple[float, float, int] | None:
    """(median, 90th percentile, count) of the steady steps' compute seconds (forward and backward
    when measured, else the step minus data wait and optimizer), warm-up steps and steps of
    another batch size than the usual one left out; None
    with fewer than 10 steady steps. Contention for cores shows as steps of the same work that
    take very different times."""
    from traindoctor.runtime.profile import default_warmup

    records = list(getattr(session, "records", None) or ())
    records = records[default_warmup(len(records)) :]
    sizes = Counter(r.samples for r in records)
    if not sizes:
        return None
    usual = sizes.most_common(1)[0][0]  # an epoch's short last batch is other work: left out
    steady = sorted(r.compute_s for r in records if r.samples == usual)
    if len(steady) < 10 or steady[len(steady) // 2] <= 0:
        return None
    return steady[len(steady) // 2], steady[min(int(len(steady) * 0.9), len(steady) - 1)], len(steady)


def peak_workers(session: Any) -> tuple[int, Any]:
    """The most loader worker processes alive at once, and the loader that saw that peak."""
    loaders = loaders_with_workers(session.loaders)
    if not loaders:
        return 0, None
    info = max(loaders, key=lambda i: (i.max_concurrent_workers, -i.id))
    return int(info.max_concurrent_workers), info


def main_threads() -> int:
    """Intra-op threads of the training process (1 when torch is not imported)."""
    torch = sys.modules.get("torch")
    try:
        return max(int(torch.get_num_threads()), 1) if torch is not None else 1
    except Exception:  # pragma: no cover - a broken torch
        return 1


#: A loop that waits for its workers at least this share of the time (not counting its own turns
#: for a core) keeps them saturated: each delivers a batch every ``workers x (wait + compute)``,
#: and what they do not spend on a core is loading's own waiting (I/O, sleeps), not a full queue.
SATURATED_WAIT = 0.5


def pipeline(timing: LoaderTiming, info: Any, session: Any) -> Any:
    """The measured pipeline of one loader, for :mod:`traindoctor.facts.data.pipeline`.

    In the main process (``num_workers == 0``) the wait *is* the time to produce a batch, and the
    training thread's CPU time inside ``next()`` is its CPU cost. With ``w`` saturated workers a
    batch arrives every ``wait + compute``, so one worker needs about ``w x (wait + compute)``
    per batch; its CPU cost is the share of a core the workers kept busy (read from ``/proc``;
    unknown elsewhere).
    """
    from traindoctor.facts.data.pipeline import Pipeline

    current = int(getattr(info, "num_workers", 0) or 0)
    compute_s = timing.compute_ms_per_batch / 1000.0
    # the training thread's time queued for a core inside next(), per batch (a busy machine)
    sampled = int(getattr(info, "queued_batches", 0) or 0)
    own_queued = float(getattr(info, "wait_queued_s", 0.0) or 0.0) / sampled if sampled else 0.0
    queued = 0.0
    saturated = True
    if current <= 0:
        fetch_s = timing.wait_ms_per_batch / 1000.0
        cpu = getattr(info, "wait_cpu_s", None)
        measured = int(getattr(info, "cpu_batches", 0) or 0)  # batches whose CPU time was read
        fetch_cpu = min(cpu / measured, fetch_s) if cpu is not None and measured else None
        queued = own_queued
    else:
        fetch_s = current * (timing.wait_ms_per_batch + timing.compute_ms_per_batch) / 1000.0
        # the workers' time on a core per batch (/proc) is loading's CPU cost; it tells how busy
        # loading keeps them only while they are saturated: the loop mostly waits for them (its
        # own turns on a core left out); otherwise they also sleep on a full queue
        cost = info.worker_cpu.per_batch() if getattr(info, "worker_cpu", None) is not None else None
        step_ms = timing.wait_ms_per_batch + timing.compute_ms_per_batch
        waited = (timing.wait_ms_per_batch - 1000.0 * own_queued) / step_ms if step_ms > 0 else 0.0
        fetch_cpu = None if cost is None else min(cost[0], fetch_s)
        saturated = waited >= SATURATED_WAIT
        if cost is not None and saturated:
            queued = cost[1]
    threads = main_threads()
    elsewhere = load_elsewhere(session, threads + current)  # the low end of the predictions
    return Pipeline(
        fetch_s=fetch_s,
        compute_s=compute_s,
        cores=cores_per_rank(session),
        threads=threads,
        fetch_cpu_s=fetch_cpu,
        fetch_queued_s=min(queued, fetch_s),
        fetch_saturated=saturated,
        busy_elsewhere=elsewhere or 0.0,
    )


def worker_advice(timing: LoaderTiming, info: Any, session: Any) -> Any:
    """The pipeline model's worker count (an :class:`~traindoctor.facts.data.pipeline.Advice`)."""
    from traindoctor.facts.data.pipeline import recommend

    current = int(getattr(info, "num_workers", 0) or 0)
    return recommend(pipeline(timing, info, session), current)


def script_name() -> str | None:
    """The running script as the user typed it (``sys.argv[0]`` while the script runs)."""
    script = sys.argv[0] if sys.argv else ""
    if not script.endswith(".py"):
        return None
    try:
        return os.path.relpath(script)
    except ValueError:  # pragma: no cover - another drive on Windows
        return script


def tune_command(script: str | None = None) -> str:
    """``traindoctor tune SCRIPT`` for the script being run, as the user would type it."""
    return f"traindoctor tune {script or script_name() or 'SCRIPT'}"


def site(info: Any) -> dict[str, Any]:
    """``filename``/``row`` keyword arguments for ``Monitor.report`` pointing at the loader."""
    out = {"filename": info.filename or "", "row": info.row}
    if getattr(info, "column", None):
        out["column"] = info.column
    return out


class LargeContainer:
    """A big Python container found on a dataset object."""

    __slots__ = ("approx_bytes", "items", "path", "type_name")

    path: str
    type_name: str
    items: int
    approx_bytes: int

    def __init__(self, path: str, type_name: str, items: int, approx_bytes: int) -> None:
        self.path = path
        self.type_name = type_name
        self.items = items
        self.approx_bytes = approx_bytes

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)


def _approx_bytes(container: Any, items: int) -> int:
    size = sys.getsizeof(container)
    if isinstance(container, dict):
        pairs = list(container.items())[:64]
        per = [sys.getsizeof(k) + sys.getsizeof(v) for k, v in pairs]
    else:
        sample = list(container)[:64] if not isinstance(container, (list, tuple)) else container[:64]
        per = [sys.getsizeof(x) for x in sample]
    return size + (int(sum(per) / len(per) * items) if per else 0)


def large_containers(dataset: Any, min_items: int, max_depth: int = 2) -> list[LargeContainer]:
    """Python lists/tuples/dicts/sets with at least ``min_items`` items held by the dataset (and
    datasets it wraps, e.g. ``Subset.dataset``), found through instance attributes only."""
    found: list[LargeContainer] = []
    seen: set[int] = set()

    def visit(obj: Any, path: str, depth: int) -> None:
        if id(obj) in seen or depth > max_depth:
            return
        seen.add(id(obj))
        attrs = getattr(obj, "__dict__", None)
        if not isinstance(attrs, dict):
            return
        for name in sorted(attrs):
            value = attrs[name]
            where = f"{path}.{name}"
            if isinstance(value, (list, tuple, dict, set, frozenset)):
                n = len(value)
                if n >= min_items:
                    found.append(LargeContainer(where, type(value).__name__, n, _approx_bytes(value, n)))
                elif isinstance(value, (list, tuple)) and name == "datasets":
                    for i, child in enumerate(value[:16]):
                        visit(child, f"{where}[{i}]", depth + 1)
            elif _looks_like_dataset(value):
                visit(value, where, depth + 1)

    visit(dataset, "dataset", 0)
    return found


def _looks_like_dataset(obj: Any) -> bool:
    return any(cls.__name__ in ("Dataset", "IterableDataset") for cls in type(obj).__mro__)


def loaders_with_workers(infos: Iterable[Any]) -> list[Any]:
    return [i for i in infos if i.num_workers > 0 and i.spawns > 0]
