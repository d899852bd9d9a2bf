"""Facts about the training loop that several monitors need: batch per forward, accumulation,
effective batch, the learning-rate trace (TD201, TD202, TD203, TD206, TD602).

The effective batch is ``samples per optimizer step x world size``. Samples per step come from the
session's step records (samples the DataLoader delivered during the step, so gradient accumulation
is included); when no loader was seen, from the per-forward batch that the layers saw times the
``backward()`` calls per step.

No torch import at module level.
"""

from __future__ import annotations

import weakref
from typing import Any

from traindoctor.runtime.live import fields_repr
from traindoctor.runtime.probes.modules import LayerStats, module_stats


def _median_low(values: Any) -> int:
    """``statistics.median_low`` without importing ``statistics`` (and ``fractions``,
    ``decimal``) into every watched process at start-up."""
    ordered = sorted(values)
    return int(ordered[(len(ordered) - 1) // 2])


def most_common(counts: dict[int, int]) -> int | None:
    """The value with the highest count (ties: the larger value)."""
    if not counts:
        return None
    return max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]


def leading_dims(
    layers: list[LayerStats], *, training: bool = True, grad: bool | None = True, ndim: int | None = None
) -> dict[int, int]:
    """Counts of the input's leading dimension over the forwards of ``layers``."""
    out: dict[int, int] = {}
    for rec in layers:
        for (shape, _dev, tr, gr), n in rec.counts.items():
            if shape is None or not shape or tr != training or (grad is not None and gr != grad):
                continue
            if ndim is not None and len(shape) != ndim:
                continue
            out[shape[0]] = out.get(shape[0], 0) + n
    return out


def small_batchnorm_batch(session: Any, min_batch: int) -> tuple[list[LayerStats], int] | None:
    """The BatchNorm layers that normalise batch statistics and their most common per-forward
    batch, when that batch is below ``min_batch`` (TD202 and TD602 judge the same number)."""
    layers = [rec for rec in module_stats(session).of_kind("batchnorm") if rec.sensitive]
    batch = most_common(leading_dims(layers))
    if batch is None or batch >= min_batch:
        return None
    return layers, batch


def forward_batch(session: Any) -> int | None:
    """The typical per-forward batch of training-mode forwards (first layer kinds that saw one)."""
    stats = module_stats(session)
    for kinds in (("batchnorm", "syncbatchnorm"), ("conv",), ("linear",)):
        dims = leading_dims(stats.of_kind(*kinds))
        if dims:
            return most_common(dims)
    return None


class StepFacts:
    """Per-step counts (backward calls per optimizer step), from the session's step records.

    Counted from the finished step records, not when ``optimizer.step()`` is entered: an
    optimizer step with a closure (LBFGS, Lightning's automatic optimization) runs the step's
    last forward and backward *inside* ``step()``, and counting at its start would miss it. A
    closure's backward calls count once: LBFGS re-evaluating the same batch 20 times is not
    20-fold gradient accumulation. The session keeps every record already, so monitors read them
    at the end (:meth:`of`) instead of copying a number at every step.
    """

    __slots__ = ("backward_calls",)

    backward_calls: list[int]

    def __init__(self) -> None:
        self.backward_calls = []

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    @classmethod
    def of(cls, session: Any) -> StepFacts:
        """The facts of ``session``'s finished steps."""
        facts = cls()
        for record in getattr(session, "records", None) or ():
            facts.add(record)
        return facts

    def add(self, record: Any) -> None:
        try:
            self.backward_calls.append(int(getattr(record, "accumulated_backward_calls", record.backward_calls)))
        except Exception:
            pass

    def accumulation(self) -> int:
        calls = [c for c in self.backward_calls if c > 0]
        return _median_low(calls) if calls else 1


def samples_per_step(session: Any) -> int | None:
    """Median samples the loader delivered per optimizer step (None when no loader fed steps)."""
    try:
        samples = [r.samples for r in session.records if getattr(r, "samples", 0) > 0]
    except Exception:
        samples = []
    if not samples:
        return None
    return _median_low(samples)


class EffectiveBatch:
    __slots__ = ("accumulation", "per_forward", "per_process", "source", "world_size")

    per_process: int
    world_size: int
    accumulation: int
    per_forward: int | None
    source: str

    def __init__(
        self, per_process: int, world_size: int, accumulation: int, per_forward: int | None, source: str
    ) -> None:
        self.per_process = per_process
        self.world_size = world_size
        self.accumulation = accumulation
        self.per_forward = per_forward
        self.source = source

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    @property
    def total(self) -> int:
        return self.per_process * self.world_size

    def evidence(self) -> dict[str, Any]:
        return {
            "effective_batch": self.total,
            "per_forward_batch": self.per_forward,
            "accumulation": self.accumulation,
            "world_size": self.world_size,
            "batch_source": self.source,
        }


def effective_batch(session: Any, steps: StepFacts) -> EffectiveBatch | None:
    world = max(int(getattr(session, "world_size", 1) or 1), 1)
    accumulation = steps.accumulation()
    per_step = samples_per_step(session)
    per_forward = forward_batch(session)
    if per_step is not None:
        if per_forward is None and accumulation:
            per_forward = max(per_step // max(accumulation, 1), 1)
        return EffectiveBatch(per_step, world, accumulation, per_forward, "loader")
    if per_forward is not None:
        return EffectiveBatch(per_forward * accumulation, world, accumulation, per_forward, "layers")
    return None


def _lr_value(value: Any) -> float | None:
    try:
        if hasattr(value, "device") and getattr(value.device, "type", "cpu") != "cpu":
            return None  # a CUDA tensor LR: reading it would synchronise every step
        return float(value)
    except Exception:
        return None


class LrTrace:
    """Learning rates of the primary optimizer's groups at its first steps, and the peak."""

    __slots__ = ("first", "keep", "optimizer_name", "optimizer_ref", "peak", "steps")

    keep: int
    first: list[list[float]]
    peak: list[float]
    steps: int
    optimizer_ref: Any
    optimizer_name: str

    def __init__(self, keep: int = 3) -> None:
        self.keep = keep
        self.first = []
        self.peak = []
        self.steps = 0
        self.optimizer_ref = None
        self.optimizer_name = ""

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    def add(self, optimizer: Any) -> None:
        if self.optimizer_ref is None:
            self.optimizer_ref = weakref.ref(optimizer)
            self.optimizer_name = type(optimizer).__name__
        elif self.optimizer_ref() is not optimizer:
            return
        values = []
        for group in optimizer.param_groups:  # every optimizer step: plain floats fast
            lr = group.get("lr")
            if type(lr) is not float:
                lr = _lr_value(lr)
            values.append(lr if lr is not None else 0.0)
        self.steps += 1
        if len(self.first) < self.keep:
            self.first.append(values)
        peak = self.peak
        if not peak:
            self.peak = list(values)
        else:  # the peak per group (groups beyond the first step's count are not tracked)
            for i in range(min(len(peak), len(values))):
                if values[i] > peak[i]:
                    peak[i] = values[i]

    def peak_lr(self) -> float | None:
        return max(self.peak) if self.peak else None

    def starts_at_peak(self) -> bool:
        """True when every group's first LR is (within 0.1 %) its peak: no warmup."""
        if not self.first or not self.peak:
            return False
        return all(p <= 0 or f >= p * 0.999 for f, p in zip(self.first[0], self.peak))


def conv_shapes(session: Any, device_type: str = "cuda") -> list[dict[tuple[int, ...], int]]:
    """Per conv layer: input shape -> forwards, over forwards on ``device_type``."""
    out = []
    for rec in module_stats(session).of_kind("conv"):
        shapes: dict[tuple[int, ...], int] = {}
        for (shape, dev, _tr, _gr), n in rec.counts.items():
            if shape is not None and dev == device_type:
                shapes[shape] = shapes.get(shape, 0) + n
        if shapes:
            out.append(shapes)
    return out
