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
