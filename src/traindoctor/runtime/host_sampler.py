"""Where the loop's own host work goes: a short, low-rate sample of the training thread's stack.

The profile's "other host work" row is a remainder (step wall time minus the measured DataLoader
wait, copies, forward, backward and optimizer step). When that remainder is a large share of the
step (a data path that does not use a ``DataLoader``, heavy logging, ...), a number alone does not
tell the user where to look. The session then starts this sampler for a bounded number of samples:
a daemon thread that every few milliseconds reads the training thread's current frame (only while
the thread is *not* inside one of the timed calls) and counts the innermost user line, plus the
line of the training loop it was called from. It never touches the user's objects, and costs
nothing in runs whose host work is small (it is never started).

Each wake-up takes the GIL from the training thread, so the sampler is kept rare: at least
:data:`MIN_INTERVAL_S` between wake-ups and at most :data:`MAX_WAKEUPS` of them in all (wake-ups
that land inside a timed call count too, so a loop whose host work is a small share cannot keep
it awake for :data:`MAX_SECONDS`). A whole run pays a few hundred GIL hand-offs, once. The time
each wake-up holds the GIL is summed in :attr:`HostWorkSampler.busy_s`: the session counts it as
the doctor's own work of the step it fell in, out of that step's other host work.
"""

from __future__ import annotations

import sys
import threading
from types import CodeType, FrameType
from typing import Any

from traindoctor.runtime.live import is_library_file
from traindoctor.runtime.phases import PHASE_OTHER
from traindoctor.runtime.step_timer import StepTimer

#: Samples to take at most, wake-ups at most (sampled or not), and the longest time to keep
#: sampling (seconds).
MAX_SAMPLES = 200
MAX_WAKEUPS = 400
MAX_SECONDS = 20.0
#: Shortest and longest time between two wake-ups (seconds).
MIN_INTERVAL_S = 0.002
MAX_INTERVAL_S = 0.02


class HostWorkSampler:
    """Counts the user lines the training thread runs between the timed calls."""

    def __init__(self, timer: StepTimer, thread_id: int, loop_code: CodeType | None, interval_s: float) -> None:
        self.timer = timer
        self.thread_id = thread_id
        self.loop_code = loop_code
        self.interval_s = min(max(interval_s, MIN_INTERVAL_S), MAX_INTERVAL_S)
        self.counts: dict[tuple[str, int, str, int | None], int] = {}
        self.samples = 0
        self.wakeups = 0
        #: Seconds the wake-ups held the GIL (written by the sampler's thread only).
        self.busy_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="traindoctor-host-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        import time

        perf = time.perf_counter
        deadline = time.monotonic() + MAX_SECONDS
        while not self._stop.wait(self.interval_s):
            t0 = perf()
            try:
                if not self._sample(deadline):
                    return
            finally:
                self.busy_s += perf() - t0

    def _sample(self, deadline: float) -> bool:
        """One wake-up; False when the sampler is done."""
        import time

        self.wakeups += 1
        if self.samples >= MAX_SAMPLES or self.wakeups > MAX_WAKEUPS or time.monotonic() > deadline:
            return False
        if self.timer.phase != PHASE_OTHER:
            return True
        frame = sys._current_frames().get(self.thread_id)
        if frame is None:
            return False
        key = self._key(frame)
        del frame
        if key is not None:
            self.counts[key] = self.counts.get(key, 0) + 1
            self.samples += 1
        return True

    def _key(self, frame: FrameType | None) -> tuple[str, int, str, int | None] | None:
        inner: FrameType | None = None
        loop_line: int | None = None
        while frame is not None:
            code = frame.f_code
            if inner is None and not is_library_file(code.co_filename):
                inner = frame
            if code is self.loop_code:
                loop_line = frame.f_lineno
                break
            frame = frame.f_back
        if inner is None:
            return None
        if self.timer.phase != PHASE_OTHER:  # it moved on while we walked: drop the sample
            return None
        return (inner.f_code.co_filename, inner.f_lineno, inner.f_code.co_name, loop_line)

    def summary(self, limit: int = 5) -> list[dict[str, Any]]:
        """The most frequent lines, with their share of the samples."""
        total = sum(self.counts.values())
        if not total:
            return []
        ranked = sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1]))[:limit]
        return [
            {"file": f, "line": line, "function": func, "loop_line": loop, "samples": n, "share": round(n / total, 3)}
            for (f, line, func, loop), n in ranked
        ]
