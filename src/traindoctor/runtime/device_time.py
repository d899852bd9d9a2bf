"""Device time of training steps: CUDA events at the host's phase boundaries, read later.

On a GPU the host only *queues* work: a kernel launched in ``forward`` runs when the device gets to
it, often while the host is already in ``backward`` or in the next step; the host learns what the
work cost only at the next synchronisation. Host time per phase is therefore launch time, and the
device's own time has to be measured on the device.

:class:`DeviceTimer` does that on sampled steps. At every phase boundary the probes report
(DataLoader ``next()``, a host-to-device copy, the model's forward, ``backward()``, the optimizer
step, a synchronisation such as ``.item()``) it records a CUDA event on the stream the work runs on
(the current stream of the *model's* device, which is not the current device in a DDP script that
never called ``set_device``), with the host time just before the record. Nothing synchronises: the
events are read when the device has passed them (``query()``, at each step end, oldest first), or
once at the end of the watch. Each timed step also records one event on an idle side stream when it
starts; that event completes as soon as it is recorded, which ties the device clock of the step's
events to the host clock.

A read step is a list of :class:`Interval` s, host time and device time of each stretch between two
boundaries, both on the host clock; :mod:`traindoctor.runtime.gpu_profile` turns them into busy and
idle time. A pair of events whose ``elapsed_time`` fails (a CUDA graph being captured, an event on
another device) drops that boundary only, never the profile.

Bounded: steps 1-32 are timed, then every 2nd, 4th, ... step (the stride doubles whenever
:data:`MAX_TIMED_STEPS` read steps are kept, dropping every other one), at most
:data:`MAX_MARKS` boundaries per step and :data:`MAX_PENDING` steps waiting to be read. Used events
go back to a pool. The timer exists only once the run uses CUDA: a CPU run never creates one.
"""

from __future__ import annotations

import time
from collections import deque
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.live import fields_repr

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.device_api import DeviceApi, Event

#: Steps timed one by one before the stride starts doubling.
FULL_STEPS = 32
#: Read steps kept; past it every other one is dropped and the stride doubles.
MAX_TIMED_STEPS = 256
#: Phase boundaries timed per step; a step with more is not timed (its events are dropped).
MAX_MARKS = 64
#: Timed steps waiting for the device to pass their events; past it new steps are not timed.
MAX_PENDING = 64
#: Events kept for reuse.
POOL_SIZE = 512

#: The interval's host call waited for the device (a blocking copy, ``.item()``, a synchronize).
BLOCKING = 1

#: A boundary as recorded: (phase that starts here, flags, tag, host time, event).
_Mark = tuple[int, int, Any, float, Any]


class Interval:
    """One stretch of a timed step between two phase boundaries, on the host clock (seconds).

    ``phase`` is what the host did (a ``PHASE_*`` of :mod:`traindoctor.runtime.profile`);
    ``host_start``/``host_end`` when it started and ended it; ``gpu_start``/``gpu_end`` when the
    device reached the boundaries' events. ``tag`` is the loader of a copy (its ``LoaderInfo.id``)
    or the site number of a synchronisation; ``flags`` holds :data:`BLOCKING`.
    """

    __slots__ = ("flags", "gpu_end", "gpu_start", "host_end", "host_start", "phase", "tag")

    phase: int
    flags: int
    tag: Any
    host_start: float
    host_end: float
    gpu_start: float
    gpu_end: float

    def __init__(
        self,
        phase: int,
        host_start: float,
        host_end: float,
        gpu_start: float,
        gpu_end: float,
        flags: int = 0,
        tag: Any = None,
    ) -> None:
        self.phase = phase
        self.flags = flags
        self.tag = tag
        self.host_start = host_start
        self.host_end = host_end
        self.gpu_start = gpu_start
        self.gpu_end = gpu_end

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    @property
    def blocking(self) -> bool:
        return bool(self.flags & BLOCKING)


class TimedStep:
    """A read step: its index and its intervals (in order, host and device times on the host clock)."""

    __slots__ = ("index", "intervals")

    index: int
    intervals: list[Interval]

    def __init__(self, index: int, intervals: list[Interval]) -> None:
        self.index = index
        self.intervals = intervals

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    @property
    def gpu_span(self) -> float:
        """Device time from the step's first boundary to its last."""
        return self.intervals[-1].gpu_end - self.intervals[0].gpu_start if self.intervals else 0.0

    @property
    def host_span(self) -> float:
        return self.intervals[-1].host_end - self.intervals[0].host_start if self.intervals else 0.0


class _Pending:
    __slots__ = ("cal", "cal_t", "index", "marks")

    def __init__(self, index: int, cal: Any, cal_t: float, marks: list[_Mark]) -> None:
        self.index = index
        self.cal = cal
        self.cal_t = cal_t
        self.marks = marks


class DeviceTimer:
    """Events at phase boundaries of sampled steps on one device (see the module docstring).

    The session calls :meth:`begin` when a step starts, :meth:`mark` at each boundary (the probes'
    wrappers, through the session), :meth:`end` when the step ends and :meth:`finish` once at the
    end of the watch; :attr:`steps` holds the read steps.
    """

    def __init__(self, api: DeviceApi, device: int) -> None:
        self.api = api
        self.device = device
        #: Whether the current step is being timed (the wrappers' marks are recorded).
        self.timing = False
        self.steps: list[TimedStep] = []
        self.stride = 1
        #: Boundaries whose ``elapsed_time`` failed (dropped one by one).
        self.failed_pairs = 0
        #: Steps not timed because too many were waiting or a graph was being captured.
        self.skipped_steps = 0
        self.notes: list[str] = []
        self._index = 0
        self._marks: list[_Mark] = []
        self._cal: Any = None
        self._cal_t = 0.0
        self._pending: deque[_Pending] = deque()
        self._pool: list[Any] = []
        self._perf = time.perf_counter

    def __repr__(self) -> str:
        return f"DeviceTimer(device={self.device}, steps={len(self.steps)}, stride={self.stride})"

    # ---------------------------------------------------------------- recording
    def _event(self) -> Event:
        pool = self._pool
        return pool.pop() if pool else self.api.event()

    def begin(self, index: int, phase: int) -> None:
        """Step ``index`` starts with the host in ``phase``: time it if it is sampled."""
        self._index = index
        self.timing = False
        if index > FULL_STEPS and index % self.stride:
            return
        if len(self._pending) >= MAX_PENDING:
            self.skipped_steps += 1
            return
        api = self.api
        if api.capturing():
            self.skipped_steps += 1
            return
        cal = self._event()
        self._cal_t = self._perf()
        cal.record(api.side_stream(self.device))
        self._cal = cal
        self._marks = []
        self.timing = True
        self.mark(phase)

    def mark(self, phase: int, flags: int = 0, tag: Any = None) -> None:
        """The host enters ``phase`` now (called only while :attr:`timing`)."""
        marks = self._marks
        if len(marks) >= MAX_MARKS:
            self._drop()
            return
        api = self.api
        if api.capturing():  # an event recorded now would belong to the graph
            self._drop()
            return
        event = self._event()
        t = self._perf()
        event.record(api.stream(self.device))
        marks.append((phase, flags, tag, t, event))

    def _drop(self) -> None:
        self.timing = False
        self.skipped_steps += 1
        self._recycle(m[4] for m in self._marks)
        self._recycle((self._cal,))
        self._marks, self._cal = [], None

    def end(self, phase: int) -> None:
        """The step ends (the host goes on in ``phase``): queue it for reading, read what the
        device has passed, and begin the next step."""
        if self.timing:
            self.mark(phase)
        if self.timing and len(self._marks) >= 2:
            self._pending.append(_Pending(self._index, self._cal, self._cal_t, self._marks))
            self._marks, self._cal = [], None
        elif self.timing:
            self._drop()
        self.timing = False
        self.poll()
        self.begin(self._index + 1, phase)

    # ---------------------------------------------------------------- reading
    def poll(self) -> None:
        """Read the waiting steps the device has passed (oldest first; never blocks)."""
        pending = self._pending
        while pending:
            try:
                done = pending[0].marks[-1][4].query()
            except Exception as exc:  # a broken event: give the step up
                self._note(f"event query failed: {type(exc).__name__}: {exc}")
                self._discard(pending.popleft())
                continue
            if not done:
                return
            self._read(pending.popleft())

    def finish(self) -> None:
        """At the end of the watch: wait for the device once, then read every waiting step."""
        self._drop() if self.timing else None
        if self._pending:
            try:
                self.api.synchronize(self.device)
            except Exception as exc:  # pragma: no cover - driver trouble: read what is complete
                self._note(f"synchronize failed: {type(exc).__name__}: {exc}")
            self.poll()
            while self._pending:  # incomplete after all: give them up
                self._discard(self._pending.popleft())

    def _read(self, step: _Pending) -> None:
        cal = step.cal
        points: list[tuple[int, int, Any, float, float]] = []
        for phase, flags, tag, t, event in step.marks:
            try:
                g = cal.elapsed_time(event) / 1000.0
            except Exception:
                self.failed_pairs += 1
                continue
            points.append((phase, flags, tag, t, g))
        self._recycle(m[4] for m in step.marks)
        self._recycle((cal,))
        if len(points) < 2:
            return
        # The side-stream event completes when it is recorded and no event is reached before it
        # is recorded: the offset that puts the device times on the host clock.
        base = max(step.cal_t, max(t - g for _p, _f, _tag, t, g in points))
        intervals = []
        for (phase, flags, tag, t0, g0), (_p, _f, _t, t1, g1) in pairwise(points):
            intervals.append(Interval(phase, t0, t1, base + g0, base + g1, flags, tag))
        self.steps.append(TimedStep(step.index, intervals))
        if len(self.steps) > MAX_TIMED_STEPS:
            self.stride *= 2
            self.steps = [s for s in self.steps if s.index <= FULL_STEPS or s.index % self.stride == 0]

    def _discard(self, step: _Pending) -> None:
        self._recycle(m[4] for m in step.marks)
        self._recycle((step.cal,))

    def _recycle(self, events: Any) -> None:
        pool = self._pool
        for event in events:
            if event is not None and len(pool) < POOL_SIZE:
                pool.append(event)

    def _note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
