"""The pipeline profile: where each training step's time goes, and what bounds the run.

A *step* is one step of the primary optimizer (the first one that stepped): from the end of one
``optimizer.step()`` to the end of the next. The session measures, inside that span:

* ``data``: time the loop waited in ``DataLoader`` ``next()``;
* ``transfer``: host-to-device copies (CUDA runs);
* ``forward``: time inside the outermost call of a model (the root ``nn.Module``'s ``__call__``);
* ``backward``: time inside ``backward()``;
* ``optimizer``: time inside ``optimizer.step()``, *without* the forward and backward that a
  closure (LBFGS ``step(closure)``) runs inside it;
* ``sync`` (CUDA runs): host time blocked in a call that waits for the GPU (``.item()``,
  ``.tolist()``, ``.cpu()``, a device-to-host copy), taken out of the row it was inside (forward,
  backward, the optimizer step or ``other``), so that the host rows add up to the step. A blocking
  host-to-device copy waits for the GPU too; its host time stays in ``transfer`` (it also copies
  from pageable memory on the host), and the device-time profile tells the two apart;
* ``other``: the remainder, i.e. host work the loop does itself between those calls (data
  preparation such as a ``get_batch`` from a memory map, the loss outside the model, logging).

A component that could not be measured is ``None``, never 0: no model forward was seen (a
functional model), so forward, backward and the rest cannot be separated, or no DataLoader was
used, so the data path is part of ``other``. These are *host* times (``time.perf_counter``). On
a GPU the host only queues kernels: forward, backward and optimizer are then launch times, and the
device's work surfaces wherever the host next waits for it (``.item()``, a blocking copy). So on a
CUDA run the device's own time is measured with events
(:mod:`traindoctor.runtime.device_time`, :mod:`traindoctor.runtime.gpu_profile`) and
:meth:`Profile.add_gpu` puts that profile beside the host one; its verdict replaces the host
verdict.

The first steps (warm-up: worker start-up, allocator growth, cuDNN autotuning, lazy init) are
excluded from the steady-state numbers. The verdict names the largest share of steady-state step
time: ``data-bound`` (DataLoader wait, or the loop's own host work between the training calls,
which on a CPU loop without a DataLoader is its data path), ``transfer-bound``, ``compute-bound``
(forward, backward, optimizer), unless peak memory is close to the device's capacity
(``memory-bound``; on CUDA judged on memory allocated by tensors, not on what the caching
allocator reserved): then the next speed-up cannot come from a larger batch.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.live import fields_repr
from traindoctor.runtime.throughput import Throughput

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.gpu_profile import GpuProfile
    from traindoctor.runtime.step_timer import StepRecord

#: Default number of warm-up steps is ``clamp(steps // 10, 1, MAX_WARMUP)`` (0 for a 1-step run).
MAX_WARMUP = 5
#: Peak memory above this share of the device's capacity makes the run memory-bound.
MEMORY_BOUND_SHARE = 0.9
#: When the doctor's own work is at least this share of the watched step, the report says so: the
#: rows leave the measured part out, but what the measurement cannot see (calls into the wrappers,
#: evicted caches) is then a visible share of the script's own times too.
DOCTOR_SHARE_NOTED = 0.2


#: A CUDA run's rates follow the device's step time when it is longer than the host's by more than
#: this share (the host queued steps faster than the device ran them).
DEVICE_BEHIND_SHARE = 0.02


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


def measure_memory() -> dict[str, Any]:
    """Peak resident memory of this process, and the machine's physical memory (GPU memory is
    :mod:`traindoctor.runtime.gpu_memory`'s, counted from the watch's start)."""
    out: dict[str, Any] = {"rss_peak_bytes": None, "physical_bytes": physical_memory()}
    try:
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["rss_peak_bytes"] = int(peak if sys.platform == "darwin" else peak * 1024)
    except Exception:  # pragma: no cover - no resource module
        pass
    return out


class Profile:
    """The run's profile. ``to_dict()`` is what the JSON report's ``"profile"`` holds.

    Per-step components that were not measured are ``None`` (and listed as such in
    ``measured``); the report prints "not measured" for them instead of a 0.
    """

    __slots__ = (
        "backward_per_step",
        "backward_s",
        "batches",
        "compute_s",
        "data_s",
        "device_step_s",
        "doctor_s",
        "forward_s",
        "gpu",
        "host_work",
        "host_work_samples",
        "loader_seen",
        "median_step_s",
        "memory",
        "optimizer_s",
        "optimizer_seen",
        "other_s",
        "p90_step_s",
        "partial",
        "reason",
        "run_s",
        "samples",
        "samples_per_s",
        "steady_steps",
        "step_s",
        "steps",
        "sync_s",
        "throughput",
        "tokens_per_s",
        "transfer_s",
        "verdict",
        "warmup_steps",
    )

    steps: int
    warmup_steps: int
    steady_steps: int
    run_s: float
    batches: int
    samples: int
    #: Steady-state seconds per step (means) by component: the script's own time, without the
    #: doctor's own work (``doctor_s``; see :mod:`traindoctor.runtime.step_timer`).
    step_s: float
    data_s: float
    transfer_s: float
    compute_s: float
    optimizer_s: float
    #: Host time blocked waiting for the GPU (``.item()``, ...): 0 on a CPU run.
    sync_s: float
    #: The doctor's own host time per steady step (its wrappers' work), left out of the rows.
    doctor_s: float
    forward_s: float | None
    backward_s: float | None
    other_s: float | None
    #: Whether the steady steps read their batches through a ``DataLoader``.
    loader_seen: bool
    #: False when no ``torch.optim`` optimizer stepped: steps end at ``backward()`` and the
    #: loop's own parameter update is part of ``other``.
    optimizer_seen: bool
    median_step_s: float
    #: The 90th percentile of the steady steps' wall time (a word in the report when > 2x median).
    p90_step_s: float
    device_step_s: float | None
    samples_per_s: float | None
    #: Tokens/s of batches of token ids fed to an embedding (None otherwise).
    tokens_per_s: float | None
    #: Samples/s, tokens/s, FLOPs and MFU (:mod:`traindoctor.runtime.throughput`).
    throughput: Throughput
    backward_per_step: float | None
    memory: dict[str, Any]
    #: Where the loop's own host work goes (sampled), when it was large: see ``Session``.
    host_work: list[dict[str, Any]]
    host_work_samples: int
    #: The device-time profile of a CUDA run (None on a CPU run, or when no step was timed).
    gpu: GpuProfile | None
    verdict: str
    reason: str
    partial: bool

    def __init__(
        self,
        run_s: float = 0.0,
        memory: dict[str, Any] | None = None,
        partial: bool = False,
        optimizer_seen: bool = True,
    ) -> None:
        """An empty profile (the "unknown" verdict); :func:`build_profile` fills it in."""
        self.run_s = run_s
        self.memory = {} if memory is None else memory
        self.partial = partial
        self.optimizer_seen = optimizer_seen
        self.steps = self.warmup_steps = self.steady_steps = 0
        self.batches = self.samples = 0
        self.step_s = self.data_s = self.transfer_s = self.compute_s = self.optimizer_s = self.sync_s = 0.0
        self.doctor_s = 0.0
        self.tokens_per_s = None
        self.throughput = Throughput()
        self.forward_s = self.backward_s = self.other_s = None
        self.loader_seen = False
        self.median_step_s = self.p90_step_s = 0.0
        self.device_step_s = self.samples_per_s = self.backward_per_step = None
        self.host_work = []
        self.host_work_samples = 0
        self.gpu = None
        self.verdict = "unknown"
        self.reason = ""

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    @property
    def shares(self) -> dict[str, float]:
        """Share of steady-state step time per component (compute includes the optimizer)."""
        if self.step_s <= 0:
            out = {"data": 0.0, "transfer": 0.0, "compute": 0.0}
            if self.other_s is not None:
                out["other"] = 0.0
            return out
        out = {
            "data": self.data_s / self.step_s,
            "transfer": self.transfer_s / self.step_s,
            "compute": (self.compute_s + self.optimizer_s) / self.step_s,
        }
        if self.sync_s > 0:
            out["sync"] = self.sync_s / self.step_s
        if self.other_s is not None:
            out["other"] = self.other_s / self.step_s
        return out

    @property
    def doctor_share(self) -> float:
        """The doctor's own work as a share of the watched step (the script's step plus it)."""
        watched = self.step_s + self.doctor_s
        return self.doctor_s / watched if watched > 0 else 0.0

    @property
    def measured(self) -> dict[str, bool]:
        return {
            "data_wait": self.loader_seen,
            "optimizer": self.optimizer_seen,
            "forward": self.forward_s is not None,
            "backward": self.backward_s is not None,
            "other": self.other_s is not None,
        }

    def to_dict(self) -> dict[str, Any]:
        shares = self.shares

        def ms(value: float | None) -> float | None:
            return None if value is None else _ms(value)

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
            "tokens_per_s": None if self.tokens_per_s is None else round(self.tokens_per_s, 3),
            "throughput": self.throughput.to_dict(),
            "backward_per_step": self.backward_per_step,
            "per_step_ms": {
                "step": _ms(self.step_s),
                "median_step": _ms(self.median_step_s),
                "p90_step": _ms(self.p90_step_s),
                "data_wait": _ms(self.data_s) if self.loader_seen else None,
                "transfer": _ms(self.transfer_s),
                "forward": ms(self.forward_s),
                "backward": ms(self.backward_s),
                "compute": _ms(self.compute_s),
                "optimizer": _ms(self.optimizer_s) if self.optimizer_seen else None,
                "sync": _ms(self.sync_s) if self.sync_s > 0 else None,
                "other": ms(self.other_s),
                "device": ms(self.device_step_s),
                "doctor": _ms(self.doctor_s),
            },
            "doctor_share": round(self.doctor_share, 4),
            "measured": self.measured,
            "shares": {k: round(v, 4) for k, v in shares.items()},
            "host_work": [dict(h) for h in self.host_work],
            "host_work_samples": self.host_work_samples,
            "memory": dict(self.memory),
            "gpu": None if self.gpu is None else self.gpu.to_dict(),
            "partial": self.partial,
        }

    def add_gpu(self, gpu: GpuProfile | None, memory: Mapping[str, Any], thresholds: Mapping[str, Any]) -> None:
        """Put a CUDA run's device profile and GPU memory beside the host profile. The verdict
        becomes the device's (the host times of a GPU run are launch times), unless the run is
        memory-bound."""
        self.memory.update(memory)
        self.gpu = gpu
        if gpu is not None and gpu.span > 0:
            self.device_step_s = gpu.span
            self._rates_follow_device(gpu.span)
        if _memory_bound(self, thresholds):
            return
        if gpu is not None and gpu.verdict != "unknown":
            self.verdict, self.reason = gpu.verdict, gpu.reason

    def _rates_follow_device(self, device_step_s: float) -> None:
        """Samples/s and tokens/s over the device's step time where the device took longer per
        step than the host: CUDA runs asynchronously, and a loop that never waits for the device
        (no ``.item()``, non-blocking copies) queues steps faster than they run, so its host step
        times are launch times and the host's rates would count steps the device had not run yet.
        Once the launch queue is full the host keeps the device's pace, so over a long run the two
        agree; over a short one only the device's time is the truth."""
        host = self.step_s
        if host <= 0 or device_step_s <= host * (1 + DEVICE_BEHIND_SHARE):
            return
        factor = host / device_step_s
        for holder in (self, self.throughput):
            if holder.samples_per_s is not None:
                holder.samples_per_s *= factor
            if holder.tokens_per_s is not None:
                holder.tokens_per_s *= factor

    def add_flops(
        self, step: int, by_precision: Mapping[str, int], samples: int, device_name: str | None, gpu: bool
    ) -> None:
        """The FLOPs of the counted step (``samples`` in it), and MFU where the device's peak is
        known (:meth:`traindoctor.runtime.throughput.Throughput.add_flops`), over the longer of the
        host's and the device's step times (see :meth:`_rates_follow_device`)."""
        step_s = max(self.step_s, self.device_step_s or 0.0)
        self.throughput.add_flops(step, by_precision, samples, step_s, device_name, gpu)


def _memory_share(memory: Mapping[str, Any]) -> tuple[float | None, str]:
    allocated, total = memory.get("cuda_allocated_peak_bytes"), memory.get("cuda_total_bytes")
    if allocated and total:
        # allocated, not reserved: the caching allocator gives its cache back before it fails
        return allocated / total, "GPU memory allocated by tensors"
    rss, phys = memory.get("rss_peak_bytes"), memory.get("physical_bytes")
    if rss and phys:
        return rss / phys, "resident memory"
    return None, ""


def _mean_or_none(values: Sequence[float | None]) -> float | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None) / len(values)


def host_work_text(host_work: Sequence[Mapping[str, Any]], limit: int = 2) -> str:
    """``"train.py:14 in get_batch (called at train.py:40) 92%"``-style summary of hot lines."""
    parts = []
    for item in list(host_work)[:limit]:
        where = f"{os.path.basename(str(item.get('file', '')))}:{item.get('line')}"
        func = item.get("function")
        text = f"{where} in {func}" if func and func != "<module>" else where
        loop = item.get("loop_line")
        if loop and loop != item.get("line"):
            text += f" (called at line {loop})"
        parts.append(f"{text} {item.get('share', 0):.0%}")
    return ", ".join(parts)


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
    host_work: Sequence[Mapping[str, Any]] | None = None,
    host_work_samples: int = 0,
    optimizer_seen: bool = True,
    token_ids: bool = False,
) -> Profile:
    """Summarise step records into a :class:`Profile` with a verdict.

    ``loose_*`` are batches fetched outside any step (a loop with no optimizer, or the tail after
    the last step); they count in the totals, and give the verdict when there are no steps.
    ``host_work`` are the sampled lines of the loop's own host work (evidence for the verdict).
    ``token_ids``: the model has an embedding, so the batches' token counts are tokens/s.
    The step the FLOPs probe counted (it ran slower) is left out of the steady steps.
    """
    cfg = thresholds or {}
    memory = dict(memory or {})
    prof = Profile(run_s=run_s, memory=memory, partial=partial, optimizer_seen=optimizer_seen)
    prof.host_work = [dict(h) for h in host_work or []]
    prof.host_work_samples = host_work_samples
    prof.steps = len(records)
    prof.batches = sum(r.batches for r in records) + loose_batches
    prof.samples = sum(r.samples for r in records) + loose_samples
    warm = cfg.get("profile.warmup_steps")
    prof.warmup_steps = default_warmup(len(records)) if warm is None else min(int(warm), len(records))
    steady = list(records[prof.warmup_steps :])
    steady = [r for r in steady if not r.flop_counted] or steady
    prof.steady_steps = len(steady)
    if steady:
        n = len(steady)
        wall = sum(r.own_s for r in steady)  # the script's own time: the doctor's work left out
        prof.step_s = wall / n
        prof.doctor_s = sum(r.doctor_s for r in steady) / n
        prof.data_s = sum(r.data_s for r in steady) / n
        prof.transfer_s = sum(r.transfer_s for r in steady) / n
        prof.optimizer_s = sum(r.optimizer_s for r in steady) / n
        prof.sync_s = sum(r.sync_s for r in steady) / n
        prof.compute_s = sum(r.compute_s for r in steady) / n
        prof.forward_s = _mean_or_none([r.forward_s for r in steady])
        prof.backward_s = _mean_or_none([r.backward_s for r in steady])
        prof.other_s = _mean_or_none([r.other_s for r in steady])
        if prof.forward_s is None or prof.backward_s is None or prof.other_s is None:
            prof.forward_s = prof.backward_s = prof.other_s = None
            prof.compute_s = sum(r.remainder_s for r in steady) / n
        prof.loader_seen = any(r.batches for r in steady)
        prof.median_step_s = _median([r.own_s for r in steady])
        walls = sorted(r.own_s for r in steady)
        prof.p90_step_s = walls[min(int(len(walls) * 0.9), len(walls) - 1)]
        devs = [r.device_s for r in steady if r.device_s is not None]
        prof.device_step_s = sum(devs) / len(devs) if devs else None
        samples = sum(r.samples for r in steady)
        prof.samples_per_s = samples / wall if wall > 0 and samples else None
        tokens = [r.tokens for r in steady]
        if token_ids and wall > 0 and all(t is not None for t in tokens):
            prof.tokens_per_s = sum(t for t in tokens if t is not None) / wall or None
        prof.throughput = Throughput(prof.samples_per_s, prof.tokens_per_s)
        prof.backward_per_step = _median([float(r.backward_calls) for r in steady])
    if _memory_bound(prof, cfg):
        return prof
    if steady and prof.step_s > 0:
        _verdict(prof)
        prof.reason += doctor_note(prof)
    elif loose_batches and run_s > 0:
        share = loose_wait_s / run_s
        prof.verdict = "data-bound" if share >= 0.5 else "compute-bound"
        prof.reason = f"no optimizer step; waiting for data took {share:.0%} of the run"
    else:
        prof.reason = "no training step was observed"
    if math.isnan(prof.step_s):  # pragma: no cover - defensive
        prof.step_s = 0.0
    return prof


def _memory_bound(prof: Profile, cfg: Mapping[str, Any]) -> bool:
    """Set the memory-bound verdict when peak memory is close to capacity."""
    mem_share, mem_what = _memory_share(prof.memory)
    mem_limit = float(cfg.get("profile.memory_bound_share", MEMORY_BOUND_SHARE))
    if mem_share is None or mem_share < mem_limit:
        return False
    prof.verdict = "memory-bound"
    prof.reason = f"peak {mem_what} is {mem_share:.0%} of capacity (limit {mem_limit:.0%})"
    return True


def doctor_note(prof: Profile) -> str:
    """``"; the doctor's own work ..."`` when it was a large share of the watched step (the
    numbers are then less certain), else empty."""
    if prof.doctor_share < DOCTOR_SHARE_NOTED:
        return ""
    return (
        f"; watching took {_ms(prof.doctor_s):g} ms per step ({prof.doctor_share:.0%} of the watched step), "
        "left out of these times: at that share they are less certain (the steps are short beside the "
        "doctor's own work)"
    )


def _verdict(prof: Profile) -> None:
    """The largest measured share of steady-state step time names the verdict."""
    compute = prof.compute_s + prof.optimizer_s
    other = prof.other_s
    parts = {"compute": compute, "data": prof.data_s, "transfer": prof.transfer_s}
    if other is not None:
        parts["other"] = other
    if prof.sync_s > 0:
        parts["sync"] = prof.sync_s
    order = ["compute", "data", "transfer", "other", "sync"]  # ties go to compute (the benign case)
    top = max(parts, key=lambda k: (parts[k], -order.index(k)))
    share = parts[top] / prof.step_s
    numbers = f"({_ms(parts[top]):g} ms of {_ms(prof.step_s):g} ms per step, {prof.steady_steps} steady steps)"
    if not prof.optimizer_seen:
        numbers += (
            "; no torch.optim optimizer stepped, so a step ends at backward() and the "
            "loop's own parameter update is in other host work"
        )
    if top == "other":
        prof.verdict = "host-bound" if prof.loader_seen else "data-bound"
        what = (
            "the loop's own host work between forward, backward and optimizer.step() (data preparation, logging, ...)"
        )
        prof.reason = f"{what} takes {share:.0%} of step time {numbers}"
        if not prof.loader_seen:
            prof.reason += "; no DataLoader is used, so this is where the data path runs"
        if prof.host_work:
            prof.reason += f"; sampled there: {host_work_text(prof.host_work)}"
        return
    prof.verdict = f"{top}-bound"
    if prof.optimizer_seen:
        computed = (
            "forward, backward and optimizer step" if prof.forward_s is not None else "compute and optimizer step"
        )
    else:
        computed = "forward and backward" if prof.forward_s is not None else "compute"
    label = {
        "data": "waiting for the DataLoader",
        "transfer": "host-to-device copies",
        "sync": "waiting for the GPU in synchronisations (`.item()`, `.cpu()`, ...)",
        "compute": computed,
    }[top]
    verb = "take" if label == "forward and backward" else "takes"
    prof.reason = f"{label} {verb} {share:.0%} of step time {numbers}"
