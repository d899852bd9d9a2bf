"""Runtime facts about GPU efficiency, read from the device-time profile of a CUDA run.

:func:`step_sync_sites` (TD801): the synchronisation sites (the user's file and line of an
``.item()``, ``.cpu()``, ``.tolist()``, ``print(tensor)`` or tensor-valued ``if``) that ran at
(almost) every steady step, with the GPU idle time charged to each
(:mod:`traindoctor.runtime.gpu_profile` charges the idle that follows a sync to it, up to the time
the host waited there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traindoctor.runtime.live import fields_repr

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.gpu_profile import GpuProfile


class SyncSiteUse:
    """One synchronisation site over the steady steps (means per step)."""

    __slots__ = ("idle_s", "site", "step_share", "syncs_per_step")

    #: The user's ``(filename, row)`` (a :class:`~traindoctor.runtime.live.Site`), or None.
    site: Any
    idle_s: float
    syncs_per_step: float
    #: Share of the steady steps that synchronised here at least once.
    step_share: float

    def __init__(self, site: Any, idle_s: float, syncs_per_step: float, step_share: float) -> None:
        self.site = site
        self.idle_s = idle_s
        self.syncs_per_step = syncs_per_step
        self.step_share = step_share

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)


def step_sync_sites(gpu: GpuProfile) -> list[SyncSiteUse]:
    """Every synchronisation site of the steady steps, the most idle first."""
    steps = gpu.steps
    if not steps:
        return []
    out = []
    for site, per_step in gpu.sync_counts.items():
        present = sum(1 for s in steps if s.sync_counts.get(site))
        out.append(SyncSiteUse(site, gpu.sync_sites.get(site, 0.0), per_step, present / len(steps)))
    out.sort(key=lambda u: (-u.idle_s, -u.syncs_per_step))
    return out


def site_text(site: Any) -> str:
    """``file:line`` of a site (``"an unknown line"`` for None)."""
    if not site:
        return "an unknown line"
    return f"{site[0]}:{site[1]}"
