"""The conditions ``traindoctor tune`` measures under: the machine's load and the cores it really got.

A measurement of speed is only as good as the machine was quiet: on shared cores, two intra-op
threads may spin-wait for each other, and a worker that gains 2x on an idle machine loses on a
busy one. tune therefore records, for every trial, the cores other programs kept busy while it
ran (:func:`traindoctor.machine.others_cores`: the machine's CPU time less that of tune's own
processes, so a trial's own workers and threads never count as contention), the load average
before and after it (:func:`traindoctor.machine.load_average`, which does count them) and the
cores this process may use: its affinity mask and, inside a container, the cgroup's CPU quota
(:func:`cores_got`). A trial ran *contended* when other programs used more than a quarter of the
cores it got (or, where their use is unknown, the load average was above half of them:
:func:`contended`); advice measured so depends on that load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from traindoctor.machine import usable_cores

#: A trial is contended when the load average exceeds this share of the cores tune got (used
#: only where other programs' CPU use is unknown: the load average counts the trial's own threads).
CONTENDED_SHARE = 0.5
#: A trial is contended when other programs kept more than this share of the cores tune got busy.
OTHERS_SHARE = 0.25
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _v2_quota(text: str) -> float | None:
    """Cores of a cgroup v2 ``cpu.max`` (``"QUOTA PERIOD"``; ``max`` means none)."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    quota, period = float(parts[0]), float(parts[1])
    return quota / period if quota > 0 and period > 0 else None


def cpu_quota(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """Cores the cgroup CPU quota allows this process (the smallest along its cgroup path), or None.

    cgroup v2: ``cpu.max`` of this process's cgroup and of each parent; cgroup v1:
    ``cpu.cfs_quota_us / cpu.cfs_period_us`` of the ``cpu`` controller. Unreadable files count
    as no quota.
    """
    quotas: list[float] = []
    try:
        lines = proc_cgroup.read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # v2: walk from this cgroup to the root
            folder = root / path.lstrip("/")
            while True:
                try:
                    quota = _v2_quota((folder / "cpu.max").read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    quota = None
                if quota is not None:
                    quotas.append(quota)
                if folder == root or root not in folder.parents:
                    break
                folder = folder.parent
        elif "cpu" in controllers.split(","):  # v1
            for name in ("cpu", "cpu,cpuacct"):
                base = root / name / path.lstrip("/")
                try:
                    quota_us = float((base / "cpu.cfs_quota_us").read_text(encoding="utf-8"))
                    period_us = float((base / "cpu.cfs_period_us").read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
                if quota_us > 0 and period_us > 0:
                    quotas.append(quota_us / period_us)
                break
    return min(quotas) if quotas else None


@dataclass(frozen=True)
class Cores:
    """The cores tune got: its affinity mask and the cgroup quota (None: no quota)."""

    affinity: int
    quota: float | None = None

    @property
    def effective(self) -> float:
        """The cores this process can really keep busy: the smaller of affinity and quota."""
        if self.quota is None:
            return float(self.affinity)
        return max(min(float(self.affinity), self.quota), 0.01)

    @property
    def whole(self) -> int:
        """:attr:`effective` as a count of cores (at least 1): the most threads or workers worth running."""
        return max(1, math.floor(self.effective + 1e-9))

    def describe(self) -> str:
        text = f"{self.affinity} usable core{'s' if self.affinity != 1 else ''}"
        if self.quota is not None and self.quota < self.affinity:
            text += f" (a cgroup CPU quota of {self.quota:g} cores)"
        return text

    def to_dict(self) -> dict[str, float | int | None]:
        return {"affinity": self.affinity, "quota": self.quota, "effective": round(self.effective, 3)}


def cores_got() -> Cores:
    """The cores this process may use now (:func:`traindoctor.machine.usable_cores` and :func:`cpu_quota`)."""
    return Cores(usable_cores(), cpu_quota())


def contended(load: float | None, cores: Cores, others: float | None = None) -> bool:
    """Whether the trial shared its cores with other programs: they kept more than
    :data:`OTHERS_SHARE` of the cores busy (``others``, in cores) or, where that is unknown, the
    load average was above :data:`CONTENDED_SHARE` of them."""
    if others is not None:
        return others > cores.effective * OTHERS_SHARE
    return load is not None and load > cores.effective * CONTENDED_SHARE
