"""The records probes hand to monitors with their events (see :mod:`traindoctor.runtime.events`).

* :class:`LoaderInfo`: one DataLoader, its configuration and its measured behaviour (the
  DataLoader probe fills it; ``on_loader_created``, ``on_batch_fetched``, ...);
* :class:`ForwardInfo`: one notable forward of a BatchNorm/conv/Dropout/Linear layer (the module
  probe; ``on_module_forward``).

Plain classes with ``__slots__`` (a ``@dataclass`` costs start-up time). No torch import.
"""

from __future__ import annotations

import weakref
from typing import Any

from traindoctor.runtime.live import fields_repr

#: An input's shape.
Shape = tuple[int, ...]


class LoaderInfo:
    """One DataLoader as the doctor sees it: its configuration (the constructor's arguments) and
    its measured behaviour (starting at zero).

    A plain class (a ``@dataclass`` costs start-up time); equality is identity.
    """

    __slots__ = (
        "_epoch_batches",
        "_epoch_last",
        "_epoch_open",
        "_epoch_spawned",
        "_epoch_start",
        "active_s",
        "batch_size",
        "batches",
        "column",
        "concurrent_workers",
        "cpu_batches",
        "dataset_len",
        "dataset_ref",
        "dataset_type",
        "drop_last",
        "epochs",
        "feeds_training",
        "filename",
        "first_batches",
        "first_start",
        "first_wait_s",
        "id",
        "iterable_dataset",
        "last_start",
        "loader_ref",
        "max_concurrent_workers",
        "max_wait_s",
        "num_workers",
        "persistent_workers",
        "pin_memory",
        "prefetch_factor",
        "queued_batches",
        "reuse_first_s",
        "row",
        "sampler_type",
        "seen_late",
        "spawns",
        "startup_s",
        "wait_cpu_s",
        "wait_queued_s",
        "wait_s",
        "worker_cpu",
    )

    id: int
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    batch_size: int | None
    prefetch_factor: int | None
    drop_last: bool
    dataset_type: str
    dataset_len: int | None
    iterable_dataset: bool
    sampler_type: str
    filename: str
    row: int | None
    loader_ref: weakref.ReferenceType[Any] | None
    dataset_ref: weakref.ReferenceType[Any] | None
    #: True when the loader was built before the watch started (seen first at ``iter()``).
    seen_late: bool
    #: 1-based column of the ``DataLoader(...)`` call (None when unknown).
    column: int | None

    # measured
    epochs: int
    spawns: int
    batches: int
    wait_s: float
    #: CPU time of the training thread inside ``next()`` over the ``cpu_batches`` batches it was
    #: read for (see :func:`traindoctor.runtime.probes.dataloader.samples_cpu`): with ``num_workers=0`` that is the CPU cost of loading
    #: (a dataset that sleeps or waits on I/O has little), read by the pipeline model
    #: (:mod:`traindoctor.facts.data.pipeline`) behind TD102's worker count.
    wait_cpu_s: float
    #: Of ``queued_batches`` (every 8th batch), the seconds the training thread waited, runnable,
    #: for a core inside ``next()`` (other programs' share of the cores; 0 where unknown).
    wait_queued_s: float
    queued_batches: int
    cpu_batches: int
    max_wait_s: float
    first_batches: int
    first_wait_s: float
    #: Time from ``iter()`` to the first batch, for epochs that spawned workers / reused them.
    startup_s: list[float]
    reuse_first_s: list[float]
    #: Wall time the loader was being iterated (``iter()`` to its last batch, summed over epochs).
    active_s: float
    #: ``perf_counter`` times of the first and the latest ``iter()`` (0.0 before the first).
    first_start: float
    last_start: float
    #: Worker processes alive in this process (all loaders) when this loader last started an epoch.
    concurrent_workers: int
    max_concurrent_workers: int
    #: True once a batch of this loader was followed by ``backward()`` or an optimizer step: it
    #: feeds training. A loader only iterated for evaluation stays False (see ``Session``).
    feeds_training: bool
    #: What its worker processes ran and waited for a core (``/proc``; see :class:`WorkerCpu`).
    worker_cpu: WorkerCpu

    _epoch_open: bool
    _epoch_start: float
    _epoch_last: float
    _epoch_batches: int
    _epoch_spawned: bool

    def __init__(
        self,
        id: int,
        num_workers: int,
        pin_memory: bool,
        persistent_workers: bool,
        batch_size: int | None,
        prefetch_factor: int | None,
        drop_last: bool,
        dataset_type: str,
        dataset_len: int | None,
        iterable_dataset: bool,
        sampler_type: str,
        filename: str,
        row: int | None,
        loader_ref: weakref.ReferenceType[Any] | None = None,
        dataset_ref: weakref.ReferenceType[Any] | None = None,
        seen_late: bool = False,
        column: int | None = None,
    ) -> None:
        self.id = id
        self.num_workers = num_workers
        self.pin_memory = pin_memory
        self.persistent_workers = persistent_workers
        self.batch_size = batch_size
        self.prefetch_factor = prefetch_factor
        self.drop_last = drop_last
        self.dataset_type = dataset_type
        self.dataset_len = dataset_len
        self.iterable_dataset = iterable_dataset
        self.sampler_type = sampler_type
        self.filename = filename
        self.row = row
        self.loader_ref = loader_ref
        self.dataset_ref = dataset_ref
        self.seen_late = seen_late
        self.column = column
        # measured
        self.epochs = self.spawns = self.batches = 0
        self.wait_s = self.wait_cpu_s = self.wait_queued_s = self.max_wait_s = 0.0
        self.cpu_batches = self.first_batches = self.queued_batches = 0
        self.first_wait_s = 0.0
        self.startup_s = []
        self.reuse_first_s = []
        self.active_s = 0.0
        self.first_start = self.last_start = 0.0
        self.concurrent_workers = self.max_concurrent_workers = 0
        self.feeds_training = False
        self.worker_cpu = WorkerCpu()
        self._epoch_open = False
        self._epoch_start = self._epoch_last = 0.0
        self._epoch_batches = 0
        self._epoch_spawned = False

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    @property
    def loader(self) -> Any:
        return self.loader_ref() if self.loader_ref is not None else None

    @property
    def dataset(self) -> Any:
        return self.dataset_ref() if self.dataset_ref is not None else None

    @property
    def steady_batches(self) -> int:
        """Batches other than the first of each epoch (those pay worker start-up)."""
        return self.batches - self.first_batches

    @property
    def steady_wait_s(self) -> float:
        return self.wait_s - self.first_wait_s

    def open_epoch(self, t0: float, spawned: bool) -> None:
        if self._epoch_open:
            self.close_epoch(t0)
        self.epochs += 1
        self.spawns += 1 if spawned else 0
        if self.epochs == 1:
            self.first_start = t0
        self.last_start = t0
        self._epoch_open = True
        self._epoch_start = self._epoch_last = t0
        self._epoch_batches = 0
        self._epoch_spawned = spawned

    def add_batch(self, wait_s: float, t_end: float) -> None:
        self.batches += 1
        self.wait_s += wait_s
        if wait_s > self.max_wait_s:
            self.max_wait_s = wait_s
        if self._epoch_open:
            if self._epoch_batches == 0:
                self.first_batches += 1
                self.first_wait_s += wait_s
                first = t_end - self._epoch_start
                (self.startup_s if self._epoch_spawned else self.reuse_first_s).append(first)
            self._epoch_batches += 1
            self._epoch_last = t_end

    def close_epoch(self, t: float | None = None) -> None:
        """End the current epoch's active span at its last batch (not at ``t``: the time after
        the last batch belongs to whatever the loop did next)."""
        if not self._epoch_open:
            return
        self.active_s += max(self._epoch_last - self._epoch_start, 0.0)
        self._epoch_open = False

    def summary(self) -> dict[str, Any]:
        """Configuration and measurements, for evidence and reports."""
        return {
            "loader": f"{self.filename}:{self.row}" if self.row else self.dataset_type,
            "num_workers": self.num_workers,
            "pin_memory": self.pin_memory,
            "persistent_workers": self.persistent_workers,
            "batch_size": self.batch_size,
            "dataset": self.dataset_type,
            "dataset_len": self.dataset_len,
            "epochs": self.epochs,
            "batches": self.batches,
            "wait_s": round(self.wait_s, 6),
            "active_s": round(self.active_s, 6),
        }


#: Batches a loader's workers must have delivered before their time per batch is judged.
WORKER_MIN_BATCHES = 8


class WorkerCpu:
    """What a loader's worker processes did per batch they delivered: the time they ran on a
    core and the time they waited, runnable, for one (:mod:`traindoctor.runtime.sched`, from
    ``/proc/PID/schedstat`` of the running epoch's workers, read now and then and at the end of
    the watch; an epoch's workers count until their last reading: non-persistent ones exit with
    their epoch). Linux; elsewhere nothing is known."""

    __slots__ = ("_batches0", "_last", "_last_batches", "_pids", "batches", "queued_s", "ran_s")

    #: Seconds run and queued of the epochs read so far, and the batches their workers delivered.
    ran_s: float
    queued_s: float
    batches: int

    def __init__(self) -> None:
        self.ran_s = self.queued_s = 0.0
        self.batches = 0
        self._pids: tuple[int, ...] = ()
        self._batches0 = self._last_batches = 0
        self._last: tuple[float, float] | None = None

    def start(self, pids: tuple[int, ...], batches: int) -> None:
        """New worker processes ``pids`` (an epoch that spawned them); ``batches``: the loader's
        batch count so far."""
        self._fold()
        self._pids, self._last = pids, None
        self._batches0 = self._last_batches = batches

    def read(self, batches: int) -> None:
        """Read the running workers' schedstat now (``batches``: the loader's count so far)."""
        if not self._pids:
            return
        from traindoctor.runtime.sched import processes_sched

        got = processes_sched(self._pids)
        if got is not None:
            self._last, self._last_batches = got, batches

    def _fold(self) -> None:
        if self._pids and self._last is not None:
            self.ran_s += self._last[0]
            self.queued_s += self._last[1]
            self.batches += self._last_batches - self._batches0
        self._pids, self._last = (), None

    def per_batch(self) -> tuple[float, float] | None:
        """(seconds run, seconds queued) per delivered batch; None before a reading of
        (:data:`WORKER_MIN_BATCHES`) batches."""
        ran, queued, batches = self.ran_s, self.queued_s, self.batches
        if self._pids and self._last is not None:
            ran, queued = ran + self._last[0], queued + self._last[1]
            batches += self._last_batches - self._batches0
        if batches < WORKER_MIN_BATCHES:
            return None
        return ran / batches, queued / batches


class ForwardInfo:
    """One notable forward, as passed to ``Monitor.on_module_forward``.

    Only forwards that may matter are emitted (train mode without autograd, eval mode with
    autograd); ordinary per-layer statistics are aggregated by the module probe instead.
    """

    __slots__ = (
        "builds_graph",
        "device_type",
        "grad_enabled",
        "kind",
        "mode_sensitive",
        "shape",
        "training",
    )

    kind: str
    shape: Shape | None
    device_type: str
    training: bool
    grad_enabled: bool
    builds_graph: bool
    #: Whether the layer actually behaves differently in train mode (BN tracking running
    #: statistics, Dropout with p > 0).
    mode_sensitive: bool

    def __init__(
        self,
        kind: str,
        shape: Shape | None,
        device_type: str,
        training: bool,
        grad_enabled: bool,
        builds_graph: bool,
        mode_sensitive: bool,
    ) -> None:
        self.kind = kind
        self.shape = shape
        self.device_type = device_type
        self.training = training
        self.grad_enabled = grad_enabled
        self.builds_graph = builds_graph
        self.mode_sensitive = mode_sensitive

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)
