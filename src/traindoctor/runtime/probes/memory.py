"""Memory probe: samples the process's memory at step ends, for the report's timeline.

Patches nothing: it only adds a step listener (:class:`~traindoctor.runtime.timeline.MemorySampler`,
whose stride doubles as the run grows, so a long run costs a handful of ``/proc`` reads).
"""

from __future__ import annotations

from typing import Any

from traindoctor.runtime.probes.base import Probe
from traindoctor.runtime.timeline import MemorySampler


class MemoryProbe(Probe):
    """Feeds the timeline's memory series (RSS, and CUDA allocated memory once CUDA is used)."""

    name = "memory"
    order = 90

    def __init__(self) -> None:
        super().__init__()
        self.sampler = MemorySampler()

    def install(self, session: Any) -> None:
        super().install(session)
        self.sampler = MemorySampler(uses_cuda=lambda: bool(session.uses_cuda))
        session.add_step_listener(self.sampler)
