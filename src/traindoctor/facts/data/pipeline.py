"""The model of the input pipeline: how fast a training loop can go with ``w`` loader workers.

The one model behind the runtime advice (TD102/TD105 recommend a worker count from a watched
run, :class:`Pipeline`) and behind ``traindoctor tune SCRIPT`` (which predicts from its measured
bounds which configurations are worth running, :class:`Bounds`), with the margins both use to
call two rates equal. Never imports torch.

:func:`loop_rate` is the model. Items (batches or samples) per second:

* ``w = 0``: loading and compute are serial, ``1 / (produce + consume)``;
* ``w > 0``: the smallest of what the workers deliver, what the loop consumes (its compute plus
  receiving the item from a worker), and what the cores can do when busy workers and the
  training threads share them (``cores / CPU seconds per item``).

Its two measured forms:

* :class:`Pipeline`, per batch, from inside a run: ``fetch_s`` (wall time one process needs to
  produce a batch: load, decode, collate), ``fetch_cpu_s`` (its CPU time; None when unknown: then
  loading is assumed CPU-bound, the pessimistic case. A dataset that sleeps or waits on I/O has
  ``fetch_cpu_s << fetch_s`` and its workers hardly compete with the training process for
  cores), ``compute_s`` (forward, backward, optimizer), ``cores`` (the cores this process may
  use, ``os.sched_getaffinity``) and ``threads`` (``torch.get_num_threads()``); ``w`` workers
  deliver ``w / fetch`` and a step's compute takes ``compute x threads`` of CPU;
* :class:`Bounds`, per sample, measured by tune's probe: the loader alone for each worker count
  and the loop alone (on cached batches) for each thread count, with their CPU costs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

#: Rates within this share of the fastest count as equally fast, and the one with fewer workers
#: wins: for the model's predictions, and for ``tune DATASET``'s measurements of the loader alone
#: (one run per configuration).
TIE = 0.05
#: The same for rates of the whole loop measured end to end (``tune SCRIPT``'s trials, medians
#: over its confirmation rounds): a measurement of the real loop carries less error than a
#: prediction, so a smaller margin still tells a real difference from noise.
MEASURED_TIE = 0.03
#: Workers are recommended only when they are predicted to beat ``num_workers=0`` by this
#: factor: they cost processes, memory and inter-process copies that the model leaves out.
MIN_GAIN = 1.15
#: The same for rates measured end to end: the measurement already paid the workers' costs
#: (their processes, copies and start-up), so a smaller margin is enough.
MEASURED_GAIN = 1.10
#: Workers that use less than this share of a core mostly wait (on I/O, a sleep): more of them
#: than the cores fit beside the training process.
MOSTLY_WAITING = 0.5
#: Workers that mostly wait are never counted as using less than this share of a core, and never
#: more than this many of them per core are worth their processes and memory.
MIN_BUSY = 0.01
WAITING_PER_CORE = 2
#: A predicted gain below this factor is called small (a measurement should settle it).
SMALL_GAIN = 1.5


def worker_ceiling(cores: int, busy: float | None = None, trainer_share: float | None = None) -> int:
    """The most loader workers worth running beside the training process on ``cores`` cores.

    The one ceiling of TD102, TD104, TD105 and ``tune SCRIPT``. Every batch costs CPU twice: the
    worker's loading and the training process's step. ``trainer_share`` is the training
    process's part of that CPU (its compute over loading plus compute, per batch; None when
    unknown: it is counted as one core): the workers get the rest of the cores, ``cores x (1 -
    trainer_share)``, so a training process that mostly waits for data leaves every core to the
    workers and one that computes as long as a worker loads leaves half of them. ``busy`` is the
    share of a core one worker keeps busy (None when unknown: a whole core): workers that mostly
    wait (a dataset that sleeps or reads from slow storage, ``busy`` below
    :data:`MOSTLY_WAITING`) fit more than the cores, up to :data:`WAITING_PER_CORE` per core;
    busy ones never more than the cores (more processes than cores is what TD104 reports). At
    least 1.
    """
    cores = max(int(cores), 1)
    if trainer_share is None:
        free = float(max(cores - 1, 1))
    else:
        free = cores * (1.0 - min(max(trainer_share, 0.0), 1.0))
    per = 1.0 if busy is None else max(min(busy, 1.0), MIN_BUSY)
    most = cores if per >= MOSTLY_WAITING else WAITING_PER_CORE * cores
    return max(min(round(free / per), most), 1)


def trainer_share(load_cpu: float, compute_cpu: float) -> float:
    """The training process's part of the CPU a batch costs (``load_cpu`` in a worker,
    ``compute_cpu`` in the training process, any unit): :func:`worker_ceiling`'s input."""
    total = load_cpu + compute_cpu
    return compute_cpu / total if total > 0 else 1.0


def keep_workers(workers: int) -> bool:
    """The persistent-workers judgement of TD103 and ``tune SCRIPT``: a loader with workers keeps
    them between passes (``persistent_workers=True``). A training loader is iterated once per
    epoch and an evaluation loader once per evaluation: starting the workers again for each pass
    costs their start-up and never makes a batch faster. TD103 reports it where the restarts
    cost visible time; tune recommends it with every worker count (its short trials run inside
    one pass and cannot see that cost)."""
    return workers > 0


def loop_rate(
    workers: int,
    *,
    produce_s: float,
    consume_s: float,
    delivered: float,
    cores: float,
    cpu_s: float | None,
    receive_s: float = 0.0,
) -> float:
    """Predicted items per second of a loop that consumes what a loader produces (see the module docstring).

    ``produce_s`` / ``consume_s``: seconds one process needs to produce an item / the loop needs
    to consume it; ``delivered``: items per second ``workers`` workers deliver; ``receive_s``:
    seconds the training process spends receiving an item from a worker; ``cpu_s``: CPU seconds
    per item of loading and consuming together, shared by ``cores`` cores (None: no core limit).
    """
    if workers <= 0:
        return 1.0 / (produce_s + consume_s)
    rate = min(delivered, 1.0 / (consume_s + receive_s))
    if cpu_s is not None:
        rate = min(rate, cores / cpu_s)
    return rate


def equally_fast(rates: Iterable[tuple[T, float]], tie: float) -> list[T]:
    """The items whose rate is within ``tie`` (a share) of the fastest, in the given order."""
    pairs = list(rates)
    best = max(rate for _, rate in pairs)
    return [item for item, rate in pairs if rate >= best * (1 - tie)]


@dataclass(frozen=True)
class Pipeline:
    """Measured per-batch costs of one loader and the loop that consumes it (seconds)."""

    fetch_s: float
    compute_s: float
    cores: int
    threads: int = 1
    fetch_cpu_s: float | None = None
    #: Of ``fetch_s``, the time the loading waited, runnable, for a core (other programs' turn on
    #: a busy machine): not time it waited on I/O (:mod:`traindoctor.runtime.sched`).
    fetch_queued_s: float = 0.0
    #: Whether ``fetch_s`` is the time loading takes (False for workers on a full queue: their
    #: CPU per batch is known, how busy loading keeps them is not).
    fetch_saturated: bool = True
    #: Cores other programs kept busy while this was measured (the load average beyond this run;
    #: 0 on an idle machine): the low end of a prediction gives the workers only what they left.
    busy_elsewhere: float = 0.0

    @property
    def worker_busy(self) -> float:
        """Share of a core one busy worker uses while it has one (its CPU time over the time it
        loaded, less the time it waited for a core; 1.0 when the CPU cost is unknown)."""
        if self.fetch_cpu_s is None or self.fetch_s <= 0 or not self.fetch_saturated:
            return 1.0
        could_run = max(self.fetch_s - self.fetch_queued_s, self.fetch_cpu_s, 1e-9)
        return min(max(self.fetch_cpu_s / could_run, 0.0), 1.0)

    @property
    def trainer_share(self) -> float:
        """The training process's part of a batch's CPU: its compute on ``threads`` threads
        against the loading (its wall time when its CPU time is unknown: busy loading)."""
        threads = max(min(self.threads, self.cores), 1)
        load = self.fetch_s if self.fetch_cpu_s is None else self.fetch_cpu_s
        return trainer_share(load, self.compute_s * threads)

    @property
    def ceiling(self) -> int:
        """:func:`worker_ceiling` of these cores, workers and training process."""
        busy = None if self.fetch_cpu_s is None or not self.fetch_saturated else self.worker_busy
        return worker_ceiling(self.cores, busy, self.trainer_share)

    def rate(self, workers: int, contended: bool = False) -> float:
        """Predicted batches per second with ``workers`` loader workers: on these cores, or with
        ``contended`` on the cores other programs left free (at least one). The main process's
        own rate (``workers=0``) is what was measured, under that load, either way."""
        fetch = max(self.fetch_s, 1e-6)
        compute = max(self.compute_s, 1e-6)
        cores: float = max(self.cores, 1)
        threads = max(min(self.threads, self.cores), 1)
        if contended:
            cores = max(cores - max(self.busy_elsewhere, 0.0), 1.0)
        cpu_fetch = self.fetch_s if self.fetch_cpu_s is None else self.fetch_cpu_s
        return loop_rate(
            workers,
            produce_s=fetch,
            consume_s=compute,
            delivered=workers / fetch,
            cores=cores,
            cpu_s=max(cpu_fetch + compute * threads, 1e-6),  # busy workers and the training threads
        )


@dataclass(frozen=True)
class Advice:
    """The worker count the model recommends and how sure it is."""

    workers: int
    rate: float
    current_rate: float
    max_workers: int
    #: Why a measurement (``traindoctor tune SCRIPT``) should settle it; empty when the model is
    #: confident.
    uncertain: str = ""
    #: The predicted speed-up on the cores other programs left free during the run (the low end
    #: of :attr:`speedup_range`); None when it is the same as :attr:`speedup`.
    low_speedup: float | None = None

    @property
    def speedup(self) -> float:
        """Predicted rate over the current configuration's (on the cores: the high end)."""
        return self.rate / self.current_rate if self.current_rate > 0 else 1.0

    @property
    def speedup_range(self) -> tuple[float, float]:
        """(low, high): the speed-up on the cores left free by the other programs of the run's
        machine, and on all of them."""
        high = self.speedup
        return (min(self.low_speedup, high) if self.low_speedup is not None else high, high)

    def speedup_text(self) -> str:
        """``1.8x``, or ``0.9-1.8x`` when the machine's load makes the gain uncertain (from the
        range as the evidence gives it, to 2 decimals, so that text and evidence never disagree)."""
        low, high = (round(x, 2) for x in self.speedup_range)
        return f"{high:.1f}x" if round(low, 1) == round(high, 1) else f"{low:.1f}-{high:.1f}x"


def recommend(pipeline: Pipeline, current: int, max_workers: int | None = None) -> Advice:
    """The fewest workers predicted within :data:`TIE` of the fastest, up to ``max_workers``
    (default: :attr:`Pipeline.ceiling`); 0 unless workers beat the main process by :data:`MIN_GAIN`."""
    limit = max(pipeline.ceiling if max_workers is None else max_workers, 0)
    rates = {w: pipeline.rate(w) for w in range(0, limit + 1)}
    chosen = min(equally_fast(rates.items(), TIE))
    if chosen > 0 and rates[chosen] < rates[0] * MIN_GAIN:
        chosen = 0
    reasons = []
    if pipeline.fetch_cpu_s is None:
        reasons.append("the CPU cost of loading a batch was not measured")
    threads = min(pipeline.threads, pipeline.cores)
    if chosen and chosen * pipeline.worker_busy + threads > pipeline.cores + 0.5:
        reasons.append(
            f"the workers would share {pipeline.cores} core{'s' if pipeline.cores != 1 else ''} "
            f"with the training process's {pipeline.threads} intra-op thread"
            f"{'s' if pipeline.threads != 1 else ''}"
        )
    current_rate = rates.get(current, pipeline.rate(current))
    if chosen != current and rates[chosen] < current_rate * SMALL_GAIN:
        reasons.append(f"the predicted gain is small ({rates[chosen] / current_rate:.2f}x)")
    low = None
    if pipeline.busy_elsewhere > 0 and chosen != current:
        low = pipeline.rate(chosen, contended=True) / pipeline.rate(current, contended=True)
        if low < MIN_GAIN <= rates[chosen] / current_rate:
            free = max(pipeline.cores - pipeline.busy_elsewhere, 1.0)
            reasons.append(
                f"other programs kept the machine busy during the run (load {pipeline.busy_elsewhere:.1f} beyond "
                f"this run's own on {pipeline.cores} core{'s' if pipeline.cores != 1 else ''}): on the "
                f"{free:g} core{'s' if free != 1 else ''} they left free the gain would be {low:.2f}x"
            )
    return Advice(chosen, rates[chosen], current_rate, limit, "; ".join(reasons), low)


@dataclass
class Bounds:
    """What ``tune SCRIPT``'s probe measured: samples/s of the loader alone and of the compute alone."""

    loader: dict[int, float]
    compute: dict[int, float]
    loader_cpu: float | None  # CPU seconds per sample of loading in the main process
    compute_cpu: dict[int, float]  # CPU seconds per sample of the loop, per thread count
    cores: int
    #: CPU seconds per sample the training process spends *receiving* batches from ``w``
    #: workers (unpickling, shared-memory rebuild), measured with the loader alone.
    receive_cpu: dict[int, float] = field(default_factory=dict)
    #: Seconds per sample the main process loading alone waited, runnable, for a core (other
    #: programs' turn; None when the kernel does not tell: :mod:`traindoctor.runtime.sched`).
    loader_queued: float | None = None

    @property
    def worker_busy(self) -> float | None:
        """Share of a core one loading process uses while it has one (CPU seconds per sample over
        the seconds per sample of the main process loading alone, less its time queued for a
        core); None when not measured."""
        rate = self.loader.get(0)
        if self.loader_cpu is None or not rate:
            return None
        could_run = max(1.0 / rate - (self.loader_queued or 0.0), self.loader_cpu, 1e-9)
        return min(max(self.loader_cpu / could_run, 0.0), 1.0)

    def trainer_share(self, threads: int) -> float | None:
        """The training process's part of a sample's CPU with ``threads`` intra-op threads (the
        loop alone's CPU per sample against the main-process loading's; their wall times when a
        CPU time was not measured); None when a bound is missing."""
        rate = self.loader.get(0)
        load = self.loader_cpu if self.loader_cpu is not None else (1.0 / rate if rate else None)
        comp = self.compute_cpu.get(threads)
        if comp is None and self.compute.get(threads):
            comp = threads / self.compute[threads]
        if load is None or comp is None:
            return None
        return trainer_share(load, comp)

    def ceiling(self, threads: int, busy: float | None) -> int:
        """:func:`worker_ceiling` beside a training process of ``threads`` intra-op threads, for
        workers that keep ``busy`` of a core busy (None: unknown, a whole core)."""
        return worker_ceiling(self.cores, busy, self.trainer_share(threads))

    def predict(self, workers: int, threads: int) -> float | None:
        """Predicted samples/s of the whole loop (:func:`loop_rate`: the loader alone delivers
        ``loader[workers]``; the CPU limit applies when both CPU costs were measured)."""
        load, comp = self.loader.get(workers), self.compute.get(threads)
        if load is None or comp is None or load <= 0 or comp <= 0:
            return None
        receive = self.receive_cpu.get(workers, 0.0)
        load_cpu, comp_cpu = self.loader_cpu, self.compute_cpu.get(threads)
        cpu = None
        if load_cpu is not None and comp_cpu is not None and load_cpu + comp_cpu > 0:
            cpu = load_cpu + comp_cpu + receive
        return loop_rate(
            workers,
            produce_s=1.0 / load,
            consume_s=1.0 / comp,
            delivered=load,
            cores=self.cores,
            cpu_s=cpu,
            receive_s=receive,
        )

    def limit(self) -> dict[str, Any] | None:
        """The physical limit: the fastest loader alone or the fastest compute alone, the smaller."""
        if not self.loader or not self.compute:
            return None
        w, load = max(self.loader.items(), key=lambda kv: kv[1])
        t, comp = max(self.compute.items(), key=lambda kv: kv[1])
        bound = "loader" if load < comp else "compute"
        return {
            "samples_per_s": round(min(load, comp), 3),
            "bound": bound,
            "detail": (
                f"the loader alone delivers at most {load:.1f} samples/s (num_workers={w}); the "
                f"loop alone consumes at most {comp:.1f} samples/s on cached batches "
                f"(torch_threads={t}); no setting of these knobs can beat the smaller under the "
                "load it was measured at"
            ),
        }
