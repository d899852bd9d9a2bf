"""Step records and batch sizes the session builds from what the probes saw (no torch import).

* :func:`backward_records`: the steps of a loop that never stepped a ``torch.optim`` optimizer,
  one per ``backward()``;
* :func:`batch_samples`: the samples in a batch, from the leading dimension of its first tensor.
"""

from __future__ import annotations

from typing import Any

from traindoctor.runtime.step_timer import StepRecord

#: ``backward()`` ends remembered for a loop without an optimizer (enough for a profile).
MAX_BACKWARD_MARKS = 100_000
#: A loop whose first this many ``backward()`` calls came without a ``torch.optim`` step updates
#: its parameters itself: from then on each ``backward()`` counts as a step for the probes that
#: watch only the first steps (gradient accumulation before a first optimizer step is shorter).
NO_OPTIMIZER_BACKWARDS = 8

#: Where one ``backward()`` ended: (time, the timer's running data, transfer, batches, samples,
#: forward (None while forward is not timed), backward and the doctor's own time totals).
BackwardMark = tuple[float, float, float, int, int, float | None, float, float]


def backward_records(marks: list[BackwardMark], started_at: float) -> list[StepRecord]:
    """Step records of a loop that never stepped a ``torch.optim`` optimizer: one step per
    ``backward()``, from the end of the previous one (the first from the first batch, or the
    watch's start). The loop's own parameter update falls in the next step's remainder."""
    records: list[StepRecord] = []
    prev: BackwardMark | None = None
    for mark in marks:
        t, data, transfer, batches, samples, fwd, bwd, own = mark
        if prev is None:
            start, p_data, p_transfer, p_batches, p_samples, p_fwd, p_bwd, p_own = (
                started_at,
                0.0,
                0.0,
                0,
                0,
                None,
                0.0,
                0.0,
            )
        else:
            start, p_data, p_transfer, p_batches, p_samples, p_fwd, p_bwd, p_own = prev
        records.append(
            StepRecord(
                index=len(records) + 1,
                start=start,
                end=t,
                data_s=data - p_data,
                transfer_s=transfer - p_transfer,
                optimizer_s=0.0,
                batches=batches - p_batches,
                samples=samples - p_samples,
                backward_calls=1,
                forward_s=None if fwd is None or p_fwd is None else fwd - p_fwd,
                backward_s=None if fwd is None or p_fwd is None else bwd - p_bwd,
                doctor_s=own - p_own,
            )
        )
        prev = mark
    return records


def batch_samples(batch: Any, _depth: int = 0) -> int:
    """Samples in a batch: the leading dimension of its first tensor/array (0 when unknown)."""
    if type(batch) in (list, tuple) and batch and _depth == 0:  # the common (x, y) batch
        first = batch[0]
        shape = getattr(first, "shape", None)
        if shape is not None and type(shape) is not tuple:
            try:
                return int(shape[0]) if len(shape) else 1
            except Exception:
                return 0
    shape = getattr(batch, "shape", None)
    if shape is not None:
        try:
            return int(shape[0]) if len(shape) else 1
        except Exception:
            return 0
    if _depth < 3:
        if isinstance(batch, (list, tuple)) and batch:
            return batch_samples(batch[0], _depth + 1)
        if isinstance(batch, dict) and batch:
            return batch_samples(next(iter(batch.values())), _depth + 1)
    return 0
