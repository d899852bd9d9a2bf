"""Memory probe: samples the process's memory at step ends, for the report's timeline.

Patches nothing: it only adds a step listener (:class:`~traindoctor.runtime.timeline.MemorySampler`,
whose stride doubles as the run grows; each sample is one ``pread`` of a ``/proc`` file kept open
while the watch runs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traindoctor.runtime.probes.base import Probe
from traindoctor.runtime.timeline import MemorySampler

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session


class MemoryProbe(Probe):
    """Feeds the timeline's memory series (RSS, and CUDA allocated memory once CUDA is used)."""

    name = "memory"
    order = 90

    def __init__(self) -> None:
        super().__init__()
        self.sampler = MemorySampler()

    def install(self, session: Session) -> None:
        super().install(session)
        self.sampler = MemorySampler(session)
        session.add_step_listener(self.sampler)

    def uninstall(self) -> None:
        super().uninstall()
        self.sampler.close()
