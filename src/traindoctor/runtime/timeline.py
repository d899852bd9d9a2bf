"""The run's per-step timeline: a capped series of step timings and memory for charts.

The profile (:mod:`traindoctor.runtime.profile`) summarises the steady state in a few means; the
HTML report and TensorBoard want the *series*: how the time split, the throughput and the memory
moved over the run (warm-up, a slow epoch start, a leak). The step records are already kept by
the session, so the series is built once at the end, off the hot path; only memory has to be
sampled during the run (:class:`MemorySampler`, a step listener that samples at most every
:data:`MEMORY_INTERVAL_S` and with a stride that doubles so it keeps at most ``2 * cap`` samples
however long the run).

Long runs are downsampled to at most :data:`MAX_POINTS` points: consecutive steps are grouped and
each point holds the group's mean per-step times and its throughput. Every numeric ``*_s`` field
of a step record becomes a ``*_ms`` field of the point, so a component added to
:class:`~traindoctor.runtime.profile.StepRecord` later shows up without a change here.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.events import SessionView
    from traindoctor.runtime.step_timer import StepRecord

#: Most points a timeline holds; longer runs are grouped into consecutive buckets.
MAX_POINTS = 300
#: Memory samples kept before the sampler halves them and doubles its stride.
MEMORY_CAP = 256
#: Shortest time between two memory samples (seconds): a sample is a system call, which inside a
#: training step costs about ten times its own few hundred nanoseconds (the kernel entry evicts
#: the step's cached state), so short steps are not sampled one by one.
MEMORY_INTERVAL_S = 0.05

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096

#: Bumped in a forked child, so that a reader opened in the parent reopens ``/proc/self`` (which
#: names the process that opened it) without asking ``getpid()`` (a system call) every sample.
_fork_generation = 0


def _after_fork_in_child() -> None:
    global _fork_generation
    _fork_generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class RssReader:
    """Reads this process's resident memory from a ``/proc/self/statm`` kept open.

    One ``pread`` per sample: opening the file each time costs ten times that, and its 8 KiB read
    buffer is allocated and freed in the middle of the training step's own allocations. Call
    :meth:`close` when done; after a ``fork`` the file is reopened.
    """

    def __init__(self) -> None:
        self._fd: int | None = None
        self._generation = -1
        self.ok = True

    def __call__(self) -> int | None:
        if not self.ok:
            return None
        try:
            if self._fd is None or self._generation != _fork_generation:
                self.close()
                self._fd = os.open("/proc/self/statm", os.O_RDONLY)
                self._generation = _fork_generation
            return int(os.pread(self._fd, 64, 0).split()[1]) * _PAGE
        except (OSError, ValueError, IndexError, AttributeError):
            self.ok = False  # no /proc (or no pread): stop trying
            self.close()
            return None

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:  # pragma: no cover
                pass


class MemorySampler:
    """Samples memory at step ends: the first step, then steps at least ``interval_s`` apart
    (by the step records' end times), on every step at first, then every 2nd, 4th, ... step.

    Called by the session after each step (a step listener): one modulo and one subtraction and,
    on sampled steps, one ``pread`` of ``/proc/self/statm`` (plus ``torch.cuda.memory_allocated``,
    which does not synchronise, once the run used CUDA). :meth:`close` releases the file.
    """

    def __init__(
        self, session: SessionView | None = None, cap: int = MEMORY_CAP, interval_s: float = MEMORY_INTERVAL_S
    ) -> None:
        """``session``: whose ``uses_cuda`` says whether CUDA memory is sampled too (None: never)."""
        self.samples: list[dict[str, Any]] = []
        self.stride = 1
        self.interval_s = interval_s
        self._cap = max(int(cap), 2)
        self._session = session
        self._rss = RssReader()
        self._last_end: float | None = None

    def __call__(self, record: StepRecord) -> None:
        index = int(record.index)
        if index % self.stride:
            return
        end = record.end
        if self._last_end is not None and end - self._last_end < self.interval_s:
            return
        self._last_end = end
        sample: dict[str, Any] = {"step": index}
        rss = self._rss()
        if rss is not None:
            sample["rss_bytes"] = rss
        if self._session is not None and self._session.uses_cuda:
            try:
                import torch

                sample["cuda_allocated_bytes"] = int(torch.cuda.memory_allocated())
            except Exception:  # pragma: no cover - driver trouble: keep the RSS sample
                pass
        if len(sample) > 1:
            self.samples.append(sample)
        if len(self.samples) >= 2 * self._cap:
            self.stride *= 2
            self.samples = [s for s in self.samples if s["step"] % self.stride == 0]

    def close(self) -> None:
        """Release the ``/proc`` file (the samples stay)."""
        self._rss.close()


def _numeric_seconds(row: Mapping[str, Any]) -> dict[str, float]:
    return {
        key[:-2]: float(value)
        for key, value in row.items()
        if key.endswith("_s") and isinstance(value, (int, float)) and not isinstance(value, bool)
    }


def build_timeline(
    records: Sequence[Any],
    *,
    started_at: float = 0.0,
    warmup_steps: int = 0,
    memory: Sequence[Mapping[str, Any]] = (),
    max_points: int = MAX_POINTS,
) -> list[dict[str, Any]]:
    """The per-step series of ``records`` (step records), at most ``max_points`` points.

    Each point: ``step`` (last step index of its group), ``steps`` (how many steps it averages),
    ``t_s`` (seconds from the start of the watch to the group's end), ``warmup`` (the group holds
    warm-up steps), the mean ``<component>_ms`` of every timed component (``wall_ms``,
    ``data_ms``, ``transfer_ms``, ``compute_ms``, ``optimizer_ms``, ...), ``samples`` and
    ``samples_per_s``, and the latest memory sample at or before the group's last step.
    """
    if not records:
        return []
    n = len(records)
    size = max(1, math.ceil(n / max(int(max_points), 1)))
    mem = sorted(memory, key=lambda s: s["step"])
    mem_i = 0
    last_mem: Mapping[str, Any] | None = None
    out: list[dict[str, Any]] = []
    for lo in range(0, n, size):
        group = records[lo : lo + size]
        rows = [r.to_dict() for r in group]
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for row in rows:
            for key, value in _numeric_seconds(row).items():
                sums[key] = sums.get(key, 0.0) + value
                counts[key] = counts.get(key, 0) + 1
        last = group[-1]
        samples = sum(int(row.get("samples") or 0) for row in rows)
        wall = sums.get("wall", 0.0)
        point: dict[str, Any] = {
            "step": int(last.index),
            "steps": len(group),
            "t_s": round(max(float(last.end) - started_at, 0.0), 6),
            "warmup": int(group[0].index) <= warmup_steps,
        }
        for key in sums:
            point[f"{key}_ms"] = round(sums[key] / counts[key] * 1000.0, 4)
        point["samples"] = samples
        point["samples_per_s"] = round(samples / wall, 3) if wall > 0 and samples else None
        while mem_i < len(mem) and mem[mem_i]["step"] <= last.index:
            last_mem = mem[mem_i]
            mem_i += 1
        if last_mem is not None:
            for key, value in last_mem.items():
                if key != "step":
                    point[key] = value
        out.append(point)
    return out


def session_timeline(session: Any, max_points: int | None = MAX_POINTS) -> list[dict[str, Any]]:
    """The timeline of a finished :class:`~traindoctor.runtime.session.Session` (fail-open).

    ``max_points=None`` keeps every step (TensorBoard); the report's JSON keeps the default cap.
    """
    try:
        sampler = next(
            (p.sampler for p in getattr(session, "probes", []) if getattr(p, "name", "") == "memory"),
            None,
        )
        return build_timeline(
            session.records,
            started_at=float(getattr(session, "started_at", 0.0)),
            warmup_steps=int(getattr(session.profile, "warmup_steps", 0)),
            memory=sampler.samples if sampler is not None else (),
            max_points=max(len(session.records), 1) if max_points is None else max_points,
        )
    except Exception as exc:  # pragma: no cover - defensive: the report must not fail
        session.internal_error("timeline", exc)
        return []
