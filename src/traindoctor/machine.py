"""The cores of this machine, as every part of traindoctor counts them.

Two different numbers, never to be mixed up: :func:`usable_cores` is what this process may run on
(its CPU affinity; what loader workers, check jobs and tune trials share), :func:`machine_cores`
is what the machine has (what the local ranks of a ``torchrun`` job share when none is bound to
its own cores); :func:`load_average` is how busy the machine is. Importable from any layer: no
torch, nothing of traindoctor.
"""

from __future__ import annotations

import os


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where unknown), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def machine_cores() -> int:
    """Logical cores of the machine, at least 1."""
    return os.cpu_count() or 1


def load_average() -> float | None:
    """The machine's one-minute load average (None where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows; a kernel without /proc/loadavg
        return None


class CpuSnapshot:
    """CPU time at one instant: the whole machine's busy time and that of one process tree.

    Two snapshots give the cores *other programs* kept busy in between (:func:`others_cores`):
    the machine's busy time (``/proc/stat``) less the time of the tree rooted at ``root`` (this
    process and every descendant: workers, trial processes, a sandbox's children). A child that
    ended in between is still counted, through its parent's ``cutime``/``cstime`` once reaped.
    Unlike the load average, which counts this run's own threads and moves over a minute, this
    says how busy the rest of the machine was during exactly that interval.
    """

    __slots__ = ("at", "busy_s", "own_s")

    def __init__(self, at: float, busy_s: float, own_s: float) -> None:
        self.at = at
        self.busy_s = busy_s
        self.own_s = own_s


def _clock_ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100.0


def _machine_busy_ticks(proc: str) -> float | None:
    """user + nice + system + irq + softirq of the ``cpu`` line of ``/proc/stat`` (steal, idle and
    iowait left out; guest time is already inside user)."""
    try:
        with open(os.path.join(proc, "stat"), encoding="ascii") as fh:
            first = fh.readline().split()
    except (OSError, UnicodeDecodeError):
        return None
    if len(first) < 8 or first[0] != "cpu":
        return None
    try:
        user, nice, system, _idle, _iowait, irq, softirq = (float(x) for x in first[1:8])
    except ValueError:
        return None
    return user + nice + system + irq + softirq


def _tree_ticks(proc: str, root: int) -> float | None:
    """utime + stime + cutime + cstime of ``root`` and all its living descendants."""
    parents: dict[int, int] = {}
    ticks: dict[int, float] = {}
    try:
        entries = os.listdir(proc)
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc, entry, "stat"), encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            continue  # ended while we read
        fields = text[text.rfind(")") + 2 :].split()
        if len(fields) < 15:
            continue
        try:
            parents[int(entry)] = int(fields[1])
            ticks[int(entry)] = sum(float(x) for x in fields[11:15])
        except ValueError:
            continue
    if root not in ticks:
        return None
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += ticks.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


def cpu_snapshot(root: int | None = None, proc: str = "/proc") -> CpuSnapshot | None:
    """The machine's and the process tree's CPU time now (``root``: this process by default);
    None where ``/proc`` cannot tell (not Linux)."""
    import time

    busy = _machine_busy_ticks(proc)
    own = _tree_ticks(proc, os.getpid() if root is None else root)
    if busy is None or own is None:
        return None
    hz = _clock_ticks()
    return CpuSnapshot(time.monotonic(), busy / hz, own / hz)


def others_cores(before: CpuSnapshot | None, after: CpuSnapshot | None) -> float | None:
    """The cores other programs kept busy between two snapshots of the same tree (0.5: half a
    core on average), or None when unknown or the interval is too short to tell (under 0.2 s,
    a few clock ticks)."""
    if before is None or after is None:
        return None
    wall = after.at - before.at
    if wall < 0.2:
        return None
    others = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    return max(0.0, others / wall)
