"""Options of a watch that rules read as thresholds (no torch import)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def training_reference(
    *,
    reference_batch: int | None = None,
    reference_lr: float | None = None,
    no_decay: Iterable[str] | str | None = None,
) -> dict[str, Any]:
    """The thresholds ``watch(reference_batch=..., reference_lr=..., no_decay=...)`` stands for.

    They are the same keys as ``thresholds={"reference_batch": ...}`` and the CLI's
    ``--reference-batch`` / ``--reference-lr`` / ``--no-decay`` (read by TD203, TD205, TD206).
    A value of the wrong kind is the caller's mistake: say so before the run starts.
    """
    out: dict[str, Any] = {}
    if reference_batch is not None:
        if isinstance(reference_batch, bool) or not isinstance(reference_batch, int) or reference_batch <= 0:
            raise ValueError(f"watch(reference_batch=...) must be a positive int, got {reference_batch!r}")
        out["reference_batch"] = reference_batch
    if reference_lr is not None:
        if (
            isinstance(reference_lr, bool)
            or not isinstance(reference_lr, (int, float))
            or not reference_lr > 0
            or reference_lr == float("inf")
        ):
            raise ValueError(f"watch(reference_lr=...) must be a positive number, got {reference_lr!r}")
        out["reference_lr"] = float(reference_lr)
    if no_decay is not None:
        items = [no_decay] if isinstance(no_decay, str) else no_decay
        try:
            patterns = list(items)
        except TypeError:
            raise ValueError(f"watch(no_decay=...) must be a list of name patterns, got {no_decay!r}") from None
        if not all(isinstance(p, str) for p in patterns):
            raise ValueError(f"watch(no_decay=...) must hold strings, got {no_decay!r}")
        out["no_decay"] = no_decay if isinstance(no_decay, str) else patterns
    return out
