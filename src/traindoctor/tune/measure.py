"""Measure DataLoader configurations on this machine and pick the fastest.

The loop consumes batches as fast as they arrive (there is no model), so what is measured is the
sustained rate at which each configuration *delivers* batches, plus the time to the first batch
(worker start-up). That rate is the ceiling a training loop can reach with that configuration.
torch is imported inside functions: importing this module (e.g. for ``traindoctor tune --help``)
does not import it.
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindoctor.facts.data.pipeline import TIE, equally_fast
from traindoctor.machine import usable_cores

__all__ = [
    "Candidate",
    "Measurement",
    "TuneError",
    "TuneResult",
    "default_candidates",
    "tune_loader",
    "worker_counts",
]

#: Format version written under ``"traindoctor_tune"`` in the JSON document.
FORMAT_VERSION = 1
DEFAULT_BATCHES = 20
DEFAULT_WARMUP_BATCHES = 3
DEFAULT_TIME_BUDGET_S = 10.0

#: The DataLoader keyword arguments tune measures and `loader_kwargs(tuned=...)` accepts.
LOADER_KEYS = ("num_workers", "persistent_workers", "prefetch_factor", "pin_memory")


class TuneError(Exception):
    """Tuning could not produce a recommendation (bad input, or the dataset itself fails)."""


@dataclass(frozen=True)
class Candidate:
    """One DataLoader configuration to measure."""

    num_workers: int
    prefetch_factor: int | None = None
    persistent_workers: bool = False
    pin_memory: bool = False

    def kwargs(self) -> dict[str, Any]:
        """The DataLoader keyword arguments of this configuration (only those it sets)."""
        out: dict[str, Any] = {"num_workers": self.num_workers}
        if self.num_workers > 0:
            out["persistent_workers"] = self.persistent_workers
            if self.prefetch_factor is not None:
                out["prefetch_factor"] = self.prefetch_factor
        if self.pin_memory:
            out["pin_memory"] = True
        return out

    def label(self) -> str:
        parts = [f"num_workers={self.num_workers}"]
        if self.num_workers > 0 and self.prefetch_factor is not None:
            parts.append(f"prefetch_factor={self.prefetch_factor}")
        if self.num_workers > 0 and not self.persistent_workers:
            parts.append("persistent_workers=False")
        if self.pin_memory:
            parts.append("pin_memory=True")
        return ", ".join(parts)

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> Candidate:
        unknown = sorted(set(raw) - set(LOADER_KEYS))
        if unknown:
            raise TuneError(
                f"candidate {dict(raw)!r}: unknown option(s) {', '.join(unknown)} (allowed: {', '.join(LOADER_KEYS)})"
            )
        workers = raw.get("num_workers", 0)
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            raise TuneError(f"candidate {dict(raw)!r}: num_workers must be an int >= 0")
        prefetch = raw.get("prefetch_factor")
        if prefetch is not None and (isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1):
            raise TuneError(f"candidate {dict(raw)!r}: prefetch_factor must be an int >= 1")
        return cls(
            num_workers=workers,
            prefetch_factor=prefetch if workers > 0 else None,
            persistent_workers=bool(raw.get("persistent_workers", workers > 0)) and workers > 0,
            pin_memory=bool(raw.get("pin_memory", False)),
        )


@dataclass
class Measurement:
    """What one candidate achieved. ``batches_per_s`` is None when it failed or ran out of time."""

    candidate: Candidate
    batches: int = 0
    seconds: float = 0.0
    first_batch_s: float | None = None
    capped: bool = False
    error: str | None = None

    @property
    def batches_per_s(self) -> float | None:
        if self.error is not None or self.batches == 0 or self.seconds <= 0:
            return None
        return self.batches / self.seconds

    def to_dict(self, baseline: float | None) -> dict[str, Any]:
        rate = self.batches_per_s
        return {
            "config": self.candidate.kwargs(),
            "batches": self.batches,
            "seconds": round(self.seconds, 6),
            "batches_per_s": None if rate is None else round(rate, 3),
            "first_batch_ms": None if self.first_batch_s is None else round(self.first_batch_s * 1e3, 3),
            "speedup": None if rate is None or not baseline else round(rate / baseline, 3),
            "capped": self.capped,
            "error": self.error,
        }


@dataclass
class TuneResult:
    """The measurements table and the recommended DataLoader kwargs.

    ``write(path)`` produces the file that ``loader_kwargs(dataset, tuned=path)`` reads: its
    ``recommended`` object holds only options that were measured (``pin_memory`` appears only
    when it was measured on a CUDA device).
    """

    measurements: list[Measurement]
    recommended: dict[str, Any]
    batch_size: int
    batches: int
    warmup_batches: int
    device: str
    cores: int
    dataset: str = ""
    samples: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def baseline(self) -> float | None:
        """batches/s of the plain ``num_workers=0`` configuration, if it was measured."""
        for m in self.measurements:
            c = m.candidate
            if c.num_workers == 0 and not c.pin_memory:
                return m.batches_per_s
        return None

    def speedup(self, measurement: Measurement) -> float | None:
        rate, base = measurement.batches_per_s, self.baseline
        return None if rate is None or not base else rate / base

    def to_dict(self) -> dict[str, Any]:
        base = self.baseline
        return {
            "traindoctor_tune": FORMAT_VERSION,
            "recommended": dict(self.recommended),
            "dataset": self.dataset,
            "samples": self.samples,
            "batch_size": self.batch_size,
            "batches": self.batches,
            "warmup_batches": self.warmup_batches,
            "device": self.device,
            "cores": self.cores,
            "tie_tolerance": TIE,
            "measurements": [m.to_dict(base) for m in self.measurements],
            "notes": list(self.notes),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def write(self, path: str | os.PathLike[str]) -> Path:
        target = Path(path)
        target.write_text(self.to_json(), encoding="utf-8")
        return target


def worker_counts(max_workers: int) -> list[int]:
    """0, 1, 2, 4, 8, ... up to ``max_workers``, and ``max_workers`` itself."""
    counts = [0]
    n = 1
    while n <= max_workers:
        counts.append(n)
        n *= 2
    if max_workers > 0 and counts[-1] != max_workers:
        counts.append(max_workers)
    return counts


def default_candidates(max_workers: int, *, cuda: bool) -> list[Candidate]:
    """The grid: worker counts x prefetch_factor {2, 4} (with workers), pin_memory only on CUDA."""
    pins = (False, True) if cuda else (False,)
    grid: list[Candidate] = []
    for workers in worker_counts(max_workers):
        for pin in pins:
            if workers == 0:
                grid.append(Candidate(0, pin_memory=pin))
                continue
            for prefetch in (2, 4):
                grid.append(Candidate(workers, prefetch, persistent_workers=True, pin_memory=pin))
    return grid


def _short_error(exc: BaseException) -> str:
    """``Type: message``; for errors re-raised from a worker, the original error's last line."""
    text = str(exc).strip()
    if "Original Traceback" in text:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        return lines[-1] if lines else type(exc).__name__
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _to_device(batch: Any, device: Any, non_blocking: bool) -> Any:
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return {k: _to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(_to_device(v, device, non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(v, device, non_blocking) for v in batch)
    return batch


def _measure(
    dataset: Any,
    candidate: Candidate,
    *,
    batch_size: int,
    collate_fn: Callable[..., Any] | None,
    batches: int,
    warmup_batches: int,
    time_budget_s: float,
    device: Any,
) -> Measurement:
    """Iterate one configuration: first batch, warm-up, then ``batches`` timed batches."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    result = Measurement(candidate)
    iterable = isinstance(dataset, IterableDataset)
    loader_args: dict[str, Any] = dict(candidate.kwargs())
    if not iterable:
        # Shuffled like training (random access matters for disk-backed data), with a private
        # generator so the caller's global RNG is not consumed.
        loader_args.update(shuffle=True, generator=torch.Generator().manual_seed(0))
    loader = DataLoader(dataset, batch_size=batch_size, drop_last=True, collate_fn=collate_fn, **loader_args)
    cuda = device is not None and torch.device(device).type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    iterator = None
    epoch_batches = 0
    start = time.perf_counter()

    def next_batch() -> Any:
        nonlocal iterator, epoch_batches
        while True:
            if iterator is None:
                iterator = iter(loader)  # noqa: F821 - the enclosing function's, deleted only after the last batch
                epoch_batches = 0
            try:
                batch = next(iterator)
            except StopIteration:
                if epoch_batches == 0:
                    raise TuneError("the dataset produced no full batch") from None
                iterator = None
                continue
            epoch_batches += 1
            return _to_device(batch, device, candidate.pin_memory) if cuda else batch

    try:
        next_batch()
        sync()
        result.first_batch_s = time.perf_counter() - start
        # Workers prefetch while the first batch is awaited: drain what can be buffered
        # (workers x prefetch_factor batches) so that the timed batches are produced, not stored.
        in_flight = candidate.num_workers * (candidate.prefetch_factor or 2)
        for _ in range(max(0, warmup_batches - 1) + in_flight):
            if time.perf_counter() - start > time_budget_s:
                result.capped = True
                return result
            next_batch()
        sync()
        timed_start = time.perf_counter()
        for _ in range(batches):
            if time.perf_counter() - start > time_budget_s:
                result.capped = True
                break
            next_batch()
            result.batches += 1
        sync()
        result.seconds = time.perf_counter() - timed_start
    except TuneError:
        raise
    except Exception as exc:  # the dataset's, the collate function's, or a worker crash
        result.error = _short_error(exc)
    finally:
        # Stop this candidate's workers before the next one starts its own. Explicitly: after a
        # worker error the iterator sits in a reference cycle, and shutting down from the garbage
        # collector's __del__ waits 5 s per worker on torch 2.x (its queues are finalized first).
        for it in (iterator, getattr(loader, "_iterator", None)):
            shutdown = getattr(it, "_shutdown_workers", None)
            if callable(shutdown):
                shutdown()
        del iterator, loader
        gc.collect()
    return result


def _recommend(measurements: Iterable[Measurement]) -> Measurement | None:
    """The fastest, except that a configuration with fewer workers within 5% of it wins."""
    ok = [m for m in measurements if m.batches_per_s is not None and not m.capped]
    if not ok:
        ok = [m for m in measurements if m.batches_per_s is not None]
    if not ok:
        return None
    close = equally_fast(((m, m.batches_per_s or 0.0) for m in ok), TIE)
    return min(
        close,
        key=lambda m: (m.candidate.num_workers, m.candidate.prefetch_factor or 0, -(m.batches_per_s or 0.0)),
    )


def _check_positive(name: str, value: Any, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TuneError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _dataset_name(dataset: Any) -> str:
    return type(dataset).__name__


def tune_loader(
    dataset: Any,
    *,
    batch_size: int,
    collate_fn: Callable[..., Any] | None = None,
    candidates: Sequence[Candidate | Mapping[str, Any]] | None = None,
    batches: int = DEFAULT_BATCHES,
    warmup_batches: int = DEFAULT_WARMUP_BATCHES,
    time_budget_s: float = DEFAULT_TIME_BUDGET_S,
    device: Any = None,
    max_workers: int | None = None,
) -> TuneResult:
    """Measure DataLoader configurations for ``dataset`` on this machine; recommend the fastest.

    Every candidate iterates the dataset (shuffled, ``drop_last=True``, restarting the epoch when
    it runs out) for ``warmup_batches`` batches, the first of which is timed as the time to the
    first batch (worker start-up included), plus ``num_workers x prefetch_factor`` batches (what
    the workers may have buffered meanwhile, which would otherwise arrive instantly and inflate
    the rate), then for ``batches`` timed batches; its rate is ``batches / seconds``. A candidate stops early once ``time_budget_s`` seconds have passed since
    its loader was created (``capped`` in the table; its rate is over the batches it finished).
    The default grid is ``num_workers`` in 0, 1, 2, 4, ... up to ``max_workers`` (default: the
    cores this process may use), ``persistent_workers=True`` and ``prefetch_factor`` 2 and 4
    with workers, and ``pin_memory`` False/True only when ``device`` (default: CUDA if available)
    is a CUDA device; batches are then copied to it (``non_blocking`` when pinned).
    The recommendation is the fastest candidate, except that one with fewer workers (then a
    smaller prefetch factor) within 5% of it is preferred. A candidate that raises is reported
    with its error and not recommended; when the ``num_workers=0`` candidate itself raises, the
    dataset is broken and :class:`TuneError` says so.
    """
    import torch

    batch_size = _check_positive("batch_size", batch_size)
    batches = _check_positive("batches", batches)
    warmup_batches = _check_positive("warmup_batches", warmup_batches)
    if isinstance(time_budget_s, bool) or not isinstance(time_budget_s, (int, float)) or time_budget_s <= 0:
        raise TuneError(f"time_budget_s must be a positive number, got {time_budget_s!r}")
    cores = usable_cores()
    if max_workers is None:
        max_workers = cores
    max_workers = _check_positive("max_workers", max_workers, minimum=0)

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise TuneError(f"device {device!r} is not a torch device: {exc}") from None
    cuda = dev.type == "cuda"
    if cuda and not torch.cuda.is_available():
        raise TuneError(f"device {device!r} asked for, but CUDA is not available")

    samples: int | None
    try:
        samples = len(dataset)
    except TypeError:
        samples = None
    if samples is not None and samples < batch_size:
        raise TuneError(f"the dataset has {samples} sample(s), fewer than one batch of {batch_size}")

    if candidates is None:
        grid = default_candidates(max_workers, cuda=cuda)
    else:
        grid = [c if isinstance(c, Candidate) else Candidate.from_mapping(c) for c in candidates]
        if not grid:
            raise TuneError("no candidates to measure")
    notes: list[str] = []
    if not cuda and any(c.pin_memory for c in grid):
        grid = [c for c in grid if not c.pin_memory]
        notes.append("pin_memory candidates skipped: no CUDA device (pinning only helps host-to-GPU copies)")

    measurements: list[Measurement] = []
    for candidate in grid:
        m = _measure(
            dataset,
            candidate,
            batch_size=batch_size,
            collate_fn=collate_fn,
            batches=batches,
            warmup_batches=warmup_batches,
            time_budget_s=float(time_budget_s),
            device=dev if cuda else None,
        )
        measurements.append(m)
        if m.error is not None and candidate.num_workers == 0:
            raise TuneError(f"{candidate.label()}: the dataset failed: {m.error}")
    failed = [m for m in measurements if m.error is not None]
    for m in failed:
        notes.append(f"{m.candidate.label()} failed: {m.error}")
    chosen = _recommend(measurements)
    if chosen is None:
        if failed and len(failed) == len(measurements):
            raise TuneError(f"every candidate failed; first: {failed[0].candidate.label()}: {failed[0].error}")
        raise TuneError(
            f"no candidate finished a timed batch within {time_budget_s:g} s; "
            "raise the time budget or lower the batch size"
        )
    if chosen.capped:
        notes.append("every candidate hit the time budget; the rates are over fewer batches than asked")
    recommended = chosen.candidate.kwargs()
    if chosen.candidate.num_workers == 0:
        recommended["persistent_workers"] = False
    if cuda:
        recommended["pin_memory"] = chosen.candidate.pin_memory
    return TuneResult(
        measurements=measurements,
        recommended=dict(sorted(recommended.items())),
        batch_size=batch_size,
        batches=batches,
        warmup_batches=warmup_batches,
        device=str(dev),
        cores=cores,
        dataset=_dataset_name(dataset),
        samples=samples,
        notes=notes,
    )
