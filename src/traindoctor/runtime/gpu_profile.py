"""GPU busy and idle time per step, from the device timer's intervals, and the GPU verdict.

Each :class:`~traindoctor.runtime.device_time.Interval` brackets, in stream order, exactly the work
the host queued while it was in one phase: the device time between its two events is that work's
run time plus the time the device waited for the host to queue more of it. How much of it was
waiting follows from the two clocks:

* a phase whose host call waited for the device (a blocking copy, ``.item()``) kept the device
  busy to its end: no idle;
* a phase the device finished well after the host left it (it was still behind at the end) had
  all its work queued in time (queued work arrives faster than it runs): no idle;
* otherwise the device caught up with the host inside the phase, and it idled for at most the time
  from reaching the phase's first event to the host leaving the phase. That is the idle time
  counted: exact when the phase queued little work (a data wait, a loop's own Python, many tiny
  kernels), an upper bound when the device ran work of its own while keeping pace.

Idle time is charged to what the host was doing: waiting for the DataLoader (``data``), host work
such as Python and kernel launches in forward, backward, the optimizer step or the loop itself
(``host``). A synchronisation (``sync``) or a blocking copy (``transfer``) empties the queue: the
idle that follows it is charged to it, up to the time the host waited in it (had the host not
waited, it would have been that far ahead of the device). This is Holistic Trace Analysis'
idle-time breakdown (host wait, kernel wait), measured live from events instead of a trace.

The verdict: ``transfer-bound`` when host-to-device copies (their device time, and the idle that
blocking copies cause) are the largest part of the device's step time; else, when the GPU idled at
least :data:`IDLE_BOUND_SHARE` of its step time for a host cause, the largest cause
(``data-bound``, ``host-bound``, ``sync-bound``); else ``compute-bound`` (busy in forward,
backward, optimizer and the loop's own kernels). The idle of a sync-bound loop can never exceed the
compute it waited for (each sync's credit is its wait), so a "largest part" rule alone would never
name it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from traindoctor.runtime.device_time import Interval, TimedStep
from traindoctor.runtime.live import fields_repr
from traindoctor.runtime.phases import (
    PHASE_BACKWARD,
    PHASE_DATA,
    PHASE_FORWARD,
    PHASE_OPTIMIZER,
    PHASE_SYNC,
    PHASE_TRANSFER,
)

#: The device counts as caught up with the host at a phase's end when it reached the phase's last
#: event less than this after the host recorded it (plus :data:`CAUGHT_UP_SHARE` of the phase).
CAUGHT_UP_S = 50e-6
CAUGHT_UP_SHARE = 0.02

#: The GPU idle (by a host cause) at least this share of its step time names the cause as the
#: bound; below it, the GPU is busy enough to be the bound itself (compute-bound).
IDLE_BOUND_SHARE = 0.25

BUSY_PARTS = ("transfer", "forward", "backward", "optimizer", "other")
IDLE_CAUSES = ("data", "host", "sync", "transfer")

_BUSY_OF = {
    PHASE_TRANSFER: "transfer",
    PHASE_FORWARD: "forward",
    PHASE_BACKWARD: "backward",
    PHASE_OPTIMIZER: "optimizer",
}


class StepGpu:
    """Device time of one step: busy per phase, idle per cause, copies and syncs (seconds)."""

    __slots__ = ("busy", "copies", "idle", "index", "span", "sync_counts", "sync_sites", "syncs")

    index: int
    span: float
    busy: dict[str, float]
    idle: dict[str, float]
    #: Per copied loader (``LoaderInfo.id``, or None): [copies, device seconds].
    copies: dict[Any, list[float]]
    syncs: int
    #: Idle charged to each synchronisation site (the sync probe's site number).
    sync_sites: dict[Any, float]
    #: Synchronisations at each site.
    sync_counts: dict[Any, int]

    def __init__(self, index: int) -> None:
        self.index = index
        self.span = 0.0
        self.busy = dict.fromkeys(BUSY_PARTS, 0.0)
        self.idle = dict.fromkeys(IDLE_CAUSES, 0.0)
        self.copies = {}
        self.syncs = 0
        self.sync_sites = {}
        self.sync_counts = {}

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    @property
    def busy_s(self) -> float:
        return sum(self.busy.values())

    @property
    def idle_s(self) -> float:
        return sum(self.idle.values())


def _idle(iv: Interval) -> float:
    span = max(iv.gpu_end - iv.gpu_start, 0.0)
    if iv.blocking:
        return 0.0
    if iv.gpu_end - iv.host_end > CAUGHT_UP_S + CAUGHT_UP_SHARE * span:
        return 0.0  # still behind the host at the end: the phase's work was all queued in time
    return min(span, max(iv.host_end - iv.gpu_start, 0.0))


def attribute(step: TimedStep) -> StepGpu:
    """Busy and idle time of one read step (see the module docstring)."""
    out = StepGpu(step.index)
    credit, credit_cause, credit_tag = 0.0, "", None
    for iv in step.intervals:
        span = max(iv.gpu_end - iv.gpu_start, 0.0)
        idle = _idle(iv)
        out.span += span
        part = _BUSY_OF.get(iv.phase, "other")
        out.busy[part] += span - idle
        if iv.phase == PHASE_TRANSFER:
            entry = out.copies.setdefault(iv.tag, [0, 0.0])
            entry[0] += 1
            entry[1] += span
        if iv.blocking:
            # The queue is empty when the host comes back: the idle that follows is this call's,
            # up to the time the host waited in it.
            credit = max(iv.host_end - iv.host_start, 0.0)
            credit_cause = "sync" if iv.phase == PHASE_SYNC else "transfer"
            credit_tag = iv.tag
            if iv.phase == PHASE_SYNC:
                out.syncs += 1
                out.sync_counts[iv.tag] = out.sync_counts.get(iv.tag, 0) + 1
            continue
        if idle <= 0.0:
            continue
        charged = min(credit, idle)
        if charged > 0.0:
            credit -= charged
            out.idle[credit_cause] += charged
            if credit_cause == "sync":
                out.sync_sites[credit_tag] = out.sync_sites.get(credit_tag, 0.0) + charged
        out.idle["data" if iv.phase == PHASE_DATA else "host"] += idle - charged
    return out


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


class GpuProfile:
    """Device time of the steady steps (means per step) and the device's verdict."""

    __slots__ = (
        "busy",
        "copies",
        "device",
        "failed_pairs",
        "idle",
        "platform",
        "reason",
        "skipped_steps",
        "span",
        "steps",
        "sync_counts",
        "sync_sites",
        "syncs_per_step",
        "timed_steps",
        "verdict",
    )

    #: The device index the events were recorded on, and the platform ("CUDA", "ROCm").
    device: int
    platform: str
    #: Timed steady steps the means are over, and every timed step read.
    steps: list[StepGpu]
    timed_steps: int
    span: float
    busy: dict[str, float]
    idle: dict[str, float]
    #: Per copied loader: [copies per step, device seconds per step].
    copies: dict[Any, list[float]]
    syncs_per_step: float
    #: Per synchronisation site: idle charged to it and synchronisations there (means per step).
    sync_sites: dict[Any, float]
    sync_counts: dict[Any, float]
    failed_pairs: int
    skipped_steps: int
    verdict: str
    reason: str

    def __init__(self, device: int = 0, platform: str = "CUDA") -> None:
        self.device = device
        self.platform = platform
        self.steps = []
        self.timed_steps = 0
        self.span = 0.0
        self.busy = dict.fromkeys(BUSY_PARTS, 0.0)
        self.idle = dict.fromkeys(IDLE_CAUSES, 0.0)
        self.copies = {}
        self.syncs_per_step = 0.0
        self.sync_sites = {}
        self.sync_counts = {}
        self.failed_pairs = self.skipped_steps = 0
        self.verdict = "unknown"
        self.reason = ""

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    @property
    def busy_s(self) -> float:
        return sum(self.busy.values())

    @property
    def idle_s(self) -> float:
        return sum(self.idle.values())

    @property
    def compute_s(self) -> float:
        """Busy time outside host-to-device copies (forward, backward, optimizer, the loop's own)."""
        return self.busy_s - self.busy["transfer"]

    def share(self, seconds: float) -> float:
        return seconds / self.span if self.span > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "platform": self.platform,
            "device_index": self.device,
            "verdict": self.verdict,
            "reason": self.reason,
            "timed_steps": self.timed_steps,
            "steady_timed_steps": len(self.steps),
            "per_step_ms": {
                "gpu_step": _ms(self.span),
                "busy": {k: _ms(v) for k, v in self.busy.items()},
                "idle": {k: _ms(v) for k, v in self.idle.items()},
            },
            "busy_share": round(self.share(self.busy_s), 4),
            "idle_share": round(self.share(self.idle_s), 4),
            "syncs_per_step": round(self.syncs_per_step, 3),
            "failed_event_pairs": self.failed_pairs,
            "skipped_steps": self.skipped_steps,
            "steps": [
                {
                    "step": s.index,
                    "gpu_ms": _ms(s.span),
                    "busy_ms": _ms(s.busy_s),
                    "idle_ms": _ms(s.idle_s),
                    "busy": {k: _ms(v) for k, v in s.busy.items()},
                    "idle": {k: _ms(v) for k, v in s.idle.items()},
                }
                for s in self.steps
            ],
        }


def build_gpu_profile(
    steps: Sequence[TimedStep],
    *,
    warmup_steps: int,
    exclude: Collection[int] = (),
    device: int = 0,
    platform: str = "CUDA",
    failed_pairs: int = 0,
    skipped_steps: int = 0,
) -> GpuProfile | None:
    """Means over the timed steps after warm-up (all timed steps when every one is warm-up),
    leaving out the steps ``exclude`` names where others remain, and the verdict; None when no
    step was timed."""
    if not steps:
        return None
    per_step = [attribute(s) for s in steps]
    steady = [s for s in per_step if s.index > warmup_steps] or per_step
    steady = [s for s in steady if s.index not in exclude] or steady
    prof = GpuProfile(device, platform)
    prof.steps = steady
    prof.timed_steps = len(per_step)
    prof.failed_pairs, prof.skipped_steps = failed_pairs, skipped_steps
    prof.span = _mean([s.span for s in steady])
    for key in BUSY_PARTS:
        prof.busy[key] = _mean([s.busy[key] for s in steady])
    for key in IDLE_CAUSES:
        prof.idle[key] = _mean([s.idle[key] for s in steady])
    n = len(steady)
    for s in steady:
        for tag, (count, seconds) in s.copies.items():
            entry = prof.copies.setdefault(tag, [0.0, 0.0])
            entry[0] += count / n
            entry[1] += seconds / n
        for tag, seconds in s.sync_sites.items():
            prof.sync_sites[tag] = prof.sync_sites.get(tag, 0.0) + seconds / n
        for tag, count in s.sync_counts.items():
            prof.sync_counts[tag] = prof.sync_counts.get(tag, 0.0) + count / n
    prof.syncs_per_step = _mean([float(s.syncs) for s in steady])
    _verdict(prof)
    return prof


def _verdict(prof: GpuProfile, idle_bound_share: float = IDLE_BOUND_SHARE) -> None:
    if prof.span <= 0:
        prof.reason = "no device time was measured"
        return
    parts = {
        "compute": prof.compute_s,
        "transfer": prof.busy["transfer"] + prof.idle["transfer"],
        "data": prof.idle["data"],
        "host": prof.idle["host"],
        "sync": prof.idle["sync"],
    }
    idle_causes = ("data", "host", "sync")
    if parts["transfer"] >= max(parts.values()):
        top = "transfer"
    elif sum(parts[k] for k in idle_causes) >= idle_bound_share * prof.span:
        top = max(idle_causes, key=lambda k: parts[k])  # ties: the first, data
    else:
        top = "compute"
    share = prof.share(parts[top])
    numbers = (
        f"({_ms(parts[top]):g} ms of {_ms(prof.span):g} ms of GPU time per step, from {prof.platform} "
        f"events on {len(prof.steps)} steady steps; GPU busy {prof.share(prof.busy_s):.0%})"
    )
    prof.verdict = f"{top}-bound"
    if top == "compute":
        phases = ", ".join(
            f"{k} {_ms(prof.busy[k]):g} ms" for k in ("forward", "backward", "optimizer", "other") if prof.busy[k] > 0
        )
        prof.reason = f"the GPU computed {share:.0%} of its step time ({phases}) {numbers}"
    elif top == "transfer":
        how = ""
        if prof.idle["transfer"] > 0:
            how = f", {_ms(prof.idle['transfer']):g} ms of it idle after blocking copies (pageable memory or non_blocking=False)"
        prof.reason = f"host-to-device copies held the GPU {share:.0%} of its step time{how} {numbers}"
    elif top == "data":
        prof.reason = f"the GPU idled {share:.0%} of its step time while the host waited for the DataLoader {numbers}"
    elif top == "host":
        prof.reason = (
            f"the GPU idled {share:.0%} of its step time waiting for the host to queue work "
            f"(Python and kernel launches in forward, backward, the optimizer step and the loop) {numbers}"
        )
    else:
        prof.reason = (
            f"the GPU idled {share:.0%} of its step time after host-device synchronisations "
            f"({prof.syncs_per_step:g} per step: `.item()`, `.cpu()`, `print(tensor)`, ...) {numbers}"
        )
