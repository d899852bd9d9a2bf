"""The pipeline profile: where each training step's time goes, and what bounds the run.

A *step* is one step of the primary optimizer (the first one that stepped). Between two step ends
the session adds up: time the loop waited for the next batch (``data``), host-to-device copies
(``transfer``), time inside ``optimizer.step()`` (``optimizer``); the rest of the step's wall time is
``compute`` (forward, backward, loss, logging: everything the loop did itself). Wall clock
(``time.perf_counter``) is used throughout; on CUDA the CPU blocks at sync points (``.item()``,
unpinned copies, a full launch queue), so steady-state wall time still reflects GPU work, and
device time per step is added from CUDA events when CUDA is used.

The first steps (warm-up: worker start-up, allocator growth, cuDNN autotuning, lazy init) are
excluded from the steady-state numbers. The verdict names the largest share of steady-state step
time (``data-bound``, ``transfer-bound``, ``compute-bound``), unless peak memory is close to the
device's capacity (``memory-bound``): then the next speed-up cannot come from a larger batch.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

#: Default number of warm-up steps is ``clamp(steps // 10, 1, MAX_WARMUP)`` (0 for a 1-step run).
MAX_WARMUP = 5
#: Peak memory above this share of the device's capacity makes the run memory-bound.
MEMORY_BOUND_SHARE = 0.9


@dataclass(slots=True)
class StepRecord:
    """Timings of one training step (seconds, wall clock)."""

    index: int
    start: float
    end: float
    data_s: float
    transfer_s: float
    optimizer_s: float
    batches: int
    samples: int
    backward_calls: int
    device_s: float | None = None

    @property
    def wall_s(self) -> float:
        return max(self.end - self.start, 0.0)

    @property
    def compute_s(self) -> float:
        return max(self.wall_s - self.data_s - self.transfer_s - self.optimizer_s, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "wall_s": self.wall_s,
            "data_s": self.data_s,
            "transfer_s": self.transfer_s,
            "compute_s": self.compute_s,
            "optimizer_s": self.optimizer_s,
            "batches": self.batches,
            "samples": self.samples,
            "backward_calls": self.backward_calls,
            "device_s": self.device_s,
        }


class StepTimer:
    """Accumulates the current step's timings; closes a :class:`StepRecord` at each step end.

    Called by the session from the probes' wrappers, so every method is a few additions.
    """

    def __init__(self) -> None:
        self.records: list[StepRecord] = []
        self._start: float | None = None
        self._data = 0.0
        self._transfer = 0.0
        self._optimizer = 0.0
        self._batches = 0
        self._samples = 0
        self._backward = 0
        self._opt_pre: float | None = None

    @property
    def backward_calls(self) -> int:
        return self._backward

    def add_batch(self, wait_s: float, t_end: float, samples: int) -> None:
        if self._start is None:
            self._start = t_end - wait_s
        self._data += wait_s
        self._batches += 1
        self._samples += samples

    def add_transfer(self, seconds: float, t_end: float) -> None:
        if self._start is None:
            self._start = t_end - seconds
        self._transfer += seconds

    def add_backward(self) -> None:
        self._backward += 1

    def optimizer_pre(self, t: float) -> None:
        if self._start is None:
            self._start = t
        self._opt_pre = t

    def optimizer_post(self, t: float, closes_step: bool) -> StepRecord | None:
        if self._opt_pre is not None:
            self._optimizer += max(t - self._opt_pre, 0.0)
            self._opt_pre = None
        if not closes_step:
            return None
        start = self._start if self._start is not None else t
        record = StepRecord(
            index=len(self.records) + 1,
            start=start,
            end=t,
            data_s=self._data,
            transfer_s=self._transfer,
            optimizer_s=self._optimizer,
            batches=self._batches,
            samples=self._samples,
            backward_calls=self._backward,
        )
        self.records.append(record)
        self._start = t
        self._data = self._transfer = self._optimizer = 0.0
        self._batches = self._samples = self._backward = 0
        return record


def default_warmup(steps: int) -> int:
    """Warm-up steps excluded from steady state: 10% of the steps, at least 1, at most 5."""
    if steps <= 1:
        return 0
    return min(max(steps // 10, 1), MAX_WARMUP)


def _median(values: Sequence[float]) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def physical_memory() -> int | None:
    """Bytes of physical memory of the machine, where the OS tells."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return None


def measure_memory(uses_cuda: bool) -> dict[str, Any]:
    """Peak memory of this process: RSS always; the CUDA caching allocator when CUDA was used."""
    out: dict[str, Any] = {"rss_peak_bytes": None, "physical_bytes": physical_memory()}
    try:
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["rss_peak_bytes"] = int(peak if sys.platform == "darwin" else peak * 1024)
    except Exception:  # pragma: no cover - no resource module
        pass
    if uses_cuda:
        try:
            import torch

            if torch.cuda.is_available() and torch.cuda.is_initialized():
                index = torch.cuda.current_device()
                out["cuda_allocated_peak_bytes"] = int(torch.cuda.max_memory_allocated(index))
                out["cuda_reserved_peak_bytes"] = int(torch.cuda.max_memory_reserved(index))
                out["cuda_total_bytes"] = int(torch.cuda.get_device_properties(index).total_memory)
        except Exception:  # pragma: no cover - driver trouble
            pass
    return out


@dataclass
class Profile:
    """The run's profile. ``to_dict()`` is what the JSON report's ``"profile"`` holds."""

    steps: int = 0
    warmup_steps: int = 0
    steady_steps: int = 0
    run_s: float = 0.0
    batches: int = 0
    samples: int = 0
    #: Steady-state seconds per step (means) by component.
    step_s: float = 0.0
    data_s: float = 0.0
    transfer_s: float = 0.0
    compute_s: float = 0.0
    optimizer_s: float = 0.0
    median_step_s: float = 0.0
    device_step_s: float | None = None
    samples_per_s: float | None = None
    backward_per_step: float | None = None
    memory: dict[str, Any] = field(default_factory=dict)
    verdict: str = "unknown"
    reason: str = ""
    partial: bool = False

    @property
    def shares(self) -> dict[str, float]:
        """Share of steady-state step time per component (compute includes the optimizer)."""
        if self.step_s <= 0:
            return {"data": 0.0, "transfer": 0.0, "compute": 0.0}
        return {
            "data": self.data_s / self.step_s,
            "transfer": self.transfer_s / self.step_s,
            "compute": (self.compute_s + self.optimizer_s) / self.step_s,
        }

    def to_dict(self) -> dict[str, Any]:
        shares = self.shares
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "steps": self.steps,
            "warmup_steps": self.warmup_steps,
            "steady_steps": self.steady_steps,
            "run_s": round(self.run_s, 6),
            "batches": self.batches,
            "samples": self.samples,
            "samples_per_s": None if self.samples_per_s is None else round(self.samples_per_s, 3),
            "backward_per_step": self.backward_per_step,
            "per_step_ms": {
                "step": _ms(self.step_s),
                "median_step": _ms(self.median_step_s),
                "data_wait": _ms(self.data_s),
                "transfer": _ms(self.transfer_s),
                "compute": _ms(self.compute_s),
                "optimizer": _ms(self.optimizer_s),
                "device": None if self.device_step_s is None else _ms(self.device_step_s),
            },
            "shares": {k: round(v, 4) for k, v in shares.items()},
            "memory": dict(self.memory),
            "partial": self.partial,
        }


def _memory_share(memory: Mapping[str, Any]) -> tuple[float | None, str]:
    reserved, total = memory.get("cuda_reserved_peak_bytes"), memory.get("cuda_total_bytes")
    if reserved and total:
        return reserved / total, "CUDA memory reserved"
    rss, phys = memory.get("rss_peak_bytes"), memory.get("physical_bytes")
    if rss and phys:
        return rss / phys, "resident memory"
    return None, ""


def build_profile(
    records: Sequence[StepRecord],
    *,
    run_s: float,
    loose_batches: int = 0,
    loose_samples: int = 0,
    loose_wait_s: float = 0.0,
    memory: Mapping[str, Any] | None = None,
    thresholds: Mapping[str, Any] | None = None,
    partial: bool = False,
) -> Profile:
    """Summarise step records into a :class:`Profile` with a verdict.

    ``loose_*`` are batches fetched outside any step (a loop with no optimizer, or the tail after
    the last step); they count in the totals, and give the verdict when there are no steps.
    """
    cfg = thresholds or {}
    memory = dict(memory or {})
    prof = Profile(run_s=run_s, memory=memory, partial=partial)
    prof.steps = len(records)
    prof.batches = sum(r.batches for r in records) + loose_batches
    prof.samples = sum(r.samples for r in records) + loose_samples
    warm = cfg.get("profile.warmup_steps")
    prof.warmup_steps = default_warmup(len(records)) if warm is None else min(int(warm), len(records))
    steady = list(records[prof.warmup_steps:])
    prof.steady_steps = len(steady)
    if steady:
        n = len(steady)
        wall = sum(r.wall_s for r in steady)
        prof.step_s = wall / n
        prof.data_s = sum(r.data_s for r in steady) / n
        prof.transfer_s = sum(r.transfer_s for r in steady) / n
        prof.optimizer_s = sum(r.optimizer_s for r in steady) / n
        prof.compute_s = sum(r.compute_s for r in steady) / n
        prof.median_step_s = _median([r.wall_s for r in steady])
        devs = [r.device_s for r in steady if r.device_s is not None]
        prof.device_step_s = sum(devs) / len(devs) if devs else None
        samples = sum(r.samples for r in steady)
        prof.samples_per_s = samples / wall if wall > 0 and samples else None
        prof.backward_per_step = _median([float(r.backward_calls) for r in steady])
    mem_share, mem_what = _memory_share(memory)
    mem_limit = float(cfg.get("profile.memory_bound_share", MEMORY_BOUND_SHARE))
    if mem_share is not None and mem_share >= mem_limit:
        prof.verdict = "memory-bound"
        prof.reason = f"peak {mem_what} is {mem_share:.0%} of capacity (limit {mem_limit:.0%})"
        return prof
    if steady and prof.step_s > 0:
        shares = prof.shares
        order = ["compute", "data", "transfer"]  # ties go to compute (the common, benign case)
        top = max(order, key=lambda k: (shares[k], -order.index(k)))
        prof.verdict = f"{top}-bound"
        part = {"data": prof.data_s, "transfer": prof.transfer_s,
                "compute": prof.compute_s + prof.optimizer_s}[top]
        label = {"data": "waiting for data", "transfer": "host-to-device copies",
                 "compute": "compute and optimizer step"}[top]
        prof.reason = (
            f"{label} takes {shares[top]:.0%} of step time "
            f"({_ms(part):g} ms of {_ms(prof.step_s):g} ms per step, {prof.steady_steps} steady steps)"
        )
    elif loose_batches and run_s > 0:
        share = loose_wait_s / run_s
        prof.verdict = "data-bound" if share >= 0.5 else "compute-bound"
        prof.reason = f"no optimizer step; waiting for data took {share:.0%} of the run"
    else:
        prof.reason = "no training step was observed"
    if math.isnan(prof.step_s):  # pragma: no cover - defensive
        prof.step_s = 0.0
    return prof
