"""A small model of the input pipeline: how fast a training loop can go with ``w`` loader workers.

Shared by the runtime advice (TD102/TD105 recommend a worker count from it) and by
``traindoctor tune SCRIPT`` (which uses it to decide which configurations are worth measuring).
Never imports torch.

Inputs, all per batch and measured:

* ``fetch_s``: wall time one process needs to produce a batch (load, decode, collate);
* ``fetch_cpu_s``: CPU time of that (None when unknown: then loading is assumed CPU-bound,
  the pessimistic case). A dataset that sleeps or waits on I/O has ``fetch_cpu_s << fetch_s``
  and its workers hardly compete with the training process for cores;
* ``compute_s``: what the loop does with a batch (forward, backward, optimizer);
* ``cores``: the cores this process may use (``os.sched_getaffinity``);
* ``threads``: the training process's intra-op threads (``torch.get_num_threads()``).

Predicted batches per second:

* ``w = 0``: loading and compute are serial, ``1 / (fetch + compute)``;
* ``w > 0``: the smallest of what the workers deliver (``w / fetch``), what the loop consumes
  (``1 / compute``), and what the cores can do when busy workers and the training threads share
  them (``cores / (fetch_cpu + compute x threads)``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: A configuration within this share of the fastest prediction counts as equally fast; the
#: one with fewer workers wins.
TIE = 0.05
#: Workers are recommended only when they are predicted to beat ``num_workers=0`` by this
#: factor: they cost processes, memory and inter-process copies that the model leaves out.
MIN_GAIN = 1.15


@dataclass(frozen=True)
class Pipeline:
    """Measured per-batch costs of one loader and the loop that consumes it (seconds)."""

    fetch_s: float
    compute_s: float
    cores: int
    threads: int = 1
    fetch_cpu_s: float | None = None

    @property
    def worker_busy(self) -> float:
        """Share of a core one busy worker uses (1.0 when the CPU cost of loading is unknown)."""
        if self.fetch_cpu_s is None or self.fetch_s <= 0:
            return 1.0
        return min(max(self.fetch_cpu_s / self.fetch_s, 0.0), 1.0)

    def rate(self, workers: int) -> float:
        """Predicted batches per second with ``workers`` loader workers."""
        fetch = max(self.fetch_s, 1e-6)
        compute = max(self.compute_s, 1e-6)
        if workers <= 0:
            return 1.0 / (fetch + compute)
        cores = max(self.cores, 1)
        threads = max(min(self.threads, cores), 1)
        cpu_fetch = self.fetch_s if self.fetch_cpu_s is None else self.fetch_cpu_s
        # the cores shared fairly by busy workers and the training threads
        cpu_cap = cores / max(cpu_fetch + compute * threads, 1e-6)
        return min(workers / fetch, 1.0 / compute, cpu_cap)


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

    @property
    def speedup(self) -> float:
        return self.rate / self.current_rate if self.current_rate > 0 else 1.0


def recommend(pipeline: Pipeline, current: int, max_workers: int | None = None) -> Advice:
    """The fewest workers predicted within 5% of the fastest, up to ``max_workers`` (default: the
    cores); 0 unless workers beat the main process by :data:`MIN_GAIN`."""
    limit = max(pipeline.cores if max_workers is None else max_workers, 0)
    rates = {w: pipeline.rate(w) for w in range(0, limit + 1)}
    best = max(rates.values())
    chosen = min(w for w, r in rates.items() if r >= best * (1 - TIE))
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
    if chosen != current and rates[chosen] < current_rate * 1.5:
        reasons.append(f"the predicted gain is small ({rates[chosen] / current_rate:.2f}x)")
    return Advice(chosen, rates[chosen], current_rate, limit, "; ".join(reasons))
