"""The session's GPU side: which device the script works on, its device timer and its memory.

A :class:`GpuWatch` exists only when the run may use CUDA (the session has a
:class:`~traindoctor.runtime.device_api.DeviceApi`); a CPU run never creates one, so none of this
costs a CPU run anything. It does nothing until the script itself shows which device it works on
(its first host-to-device copy, or an optimizer whose parameters live on the device) *and* has
initialised CUDA (:meth:`DeviceApi.ready`): from then on it times the steps on that device (the
model's device, not the current one), reads the device's facts (name, capability, memory) and
counts GPU memory from that moment. At the end it builds the
:class:`~traindoctor.runtime.gpu_profile.GpuProfile` and the ``cuda_*`` memory entries.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.device_time import DeviceTimer
from traindoctor.runtime.gpu_memory import gpu_memory, read_stats
from traindoctor.runtime.gpu_profile import GpuProfile, build_gpu_profile

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.device import DeviceInfo
    from traindoctor.runtime.device_api import DeviceApi

#: Step ends at which the bytes allocated are sampled (for the batch-fit estimate), at most.
MAX_MEMORY_SAMPLES = 64


class GpuWatch:
    """The device the script works on, timed from when the script first used it."""

    def __init__(self, api: DeviceApi) -> None:
        self.api = api
        #: Whether the script had initialised CUDA before the watch started (then the process's
        #: memory peaks are not the watch's).
        self.ready_at_start = api.ready()
        #: The device index the script works on (None until it used one).
        self.device: int | None = None
        self.timer: DeviceTimer | None = None
        self._baseline: dict[str, int] | None = None
        self._allocated: list[int] = []
        self.notes: list[str] = []

    def __repr__(self) -> str:
        return f"GpuWatch(device={self.device}, timer={self.timer!r})"

    def use(self, device: int | None, step: int, phase: int) -> bool:
        """The script put work on ``device`` (None: the current one) during step ``step + 1``:
        start timing there. False while the script has not initialised CUDA (nothing is
        started then, and a later use asks again)."""
        api = self.api
        if not api.ready():
            return False
        index = api.current_device() if device is None else device
        self.device = index
        if self.ready_at_start:
            self._baseline = read_stats(api.memory_stats(index))
        self.timer = DeviceTimer(api, index)
        self.timer.begin(step + 1, phase)
        return True

    def device_info(self, base: DeviceInfo) -> DeviceInfo:
        """``base`` with the facts of the device in use (read now that CUDA is initialised)."""
        from traindoctor.runtime.device import DeviceInfo

        if self.device is None:
            return base
        name, capability, total = self.api.properties(self.device)
        return DeviceInfo(
            type="cuda",
            name=name,
            capability=capability,
            bf16_supported=self.api.platform == "ROCm" or capability >= (8, 0),
            cuda_available=True,
            total_memory=total,
            device_count=base.device_count,
            platform=self.api.platform,
        )

    def step_end(self, index: int, phase: int) -> None:
        """Step ``index`` ended (the host goes on in ``phase``)."""
        timer = self.timer
        if timer is None:
            return
        timer.end(phase)
        if len(self._allocated) < MAX_MEMORY_SAMPLES and (index <= 8 or index & (index - 1) == 0):
            assert self.device is not None
            self._allocated.append(self.api.memory_allocated(self.device))

    def finish(self, warmup_steps: int, exclude: Collection[int] = ()) -> tuple[GpuProfile | None, dict[str, Any]]:
        """Read the last events (one synchronisation) and build the device profile and the
        ``cuda_*`` memory entries (empty when the script never used the device); the steps
        ``exclude`` names are left out of the steady means."""
        timer = self.timer
        if timer is None or self.device is None:
            return None, {}
        timer.finish()
        self.notes.extend(timer.notes)
        profile = build_gpu_profile(
            timer.steps,
            warmup_steps=warmup_steps,
            exclude=exclude,
            device=self.device,
            platform=self.api.platform,
            failed_pairs=timer.failed_pairs,
            skipped_steps=timer.skipped_steps,
        )
        _name, _cap, total = self.api.properties(self.device)
        memory = gpu_memory(
            self._baseline, read_stats(self.api.memory_stats(self.device)), total=total, step_allocated=self._allocated
        )
        return profile, memory
