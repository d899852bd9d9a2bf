"""How long a thread or process ran, and how long it waited for a core (Linux's ``schedstat``).

CPU time over wall time says how busy loading keeps a core only on an idle machine: where other
programs share the cores, a loader that never sleeps also waits, runnable, for its turn, and
looks as if it waited on I/O. ``/proc/.../schedstat`` holds both the time a task ran and the time
it spent runnable in a run queue, so ``ran / (wall - queued)`` is the share of a core it uses
whenever it has one, whatever the load (a decoding loader: about 1; one that sleeps or reads
slow storage: well below). No torch import; None where the kernel does not tell.
"""

from __future__ import annotations

import os

#: (seconds running on a core, seconds runnable in a run queue)
Sched = tuple[float, float]


def parse_schedstat(data: bytes) -> Sched | None:
    """``b"RUN_NS WAIT_NS SLICES"`` as seconds (None when malformed)."""
    fields = data.split()
    try:
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (IndexError, ValueError):
        return None


def processes_sched(pids: tuple[int, ...]) -> Sched | None:
    """The summed schedstat of processes ``pids`` (their main threads: a DataLoader worker loads
    in its main thread); None when none of them can be read (gone, or another platform)."""
    run = wait = 0.0
    seen = False
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat", "rb") as fh:
                got = parse_schedstat(fh.read())
        except OSError:
            continue
        if got is not None:
            run, wait, seen = run + got[0], wait + got[1], True
    return (run, wait) if seen else None


class ThreadSched:
    """The calling thread's schedstat, read with one ``pread`` of a file kept open (opened by the
    thread that reads it first; another thread reads nothing)."""

    __slots__ = ("_fd", "_thread")

    def __init__(self) -> None:
        self._fd: int | None = None
        self._thread: int | None = None

    def read(self) -> Sched | None:
        import threading

        ident = threading.get_ident()
        if self._thread is None:
            self._thread = ident
            try:
                self._fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
            except OSError:
                self._fd = None
        if self._fd is None or ident != self._thread:
            return None
        try:
            return parse_schedstat(os.pread(self._fd, 128, 0))
        except OSError:
            return None

    def close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:  # pragma: no cover
                pass
            self._fd = None


def busy_share(ran_s: float, wall_s: float, queued_s: float) -> float | None:
    """The share of a core a task used while it was not waiting for one (None without time)."""
    could_run = wall_s - queued_s
    if could_run <= 0 or ran_s <= 0:
        return None
    return min(ran_s / could_run, 1.0)
