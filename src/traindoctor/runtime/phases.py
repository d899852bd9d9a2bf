"""What the training thread is doing: the phases the probes mark on the host.

The host-work sampler samples only ``PHASE_OTHER`` (the loop's own host work between the timed
calls); the device timer labels each stretch of device time with the phase the host was in when
it queued the work (:mod:`traindoctor.runtime.device_time`). ``PHASE_TRANSFER`` (a host-to-device
copy) and ``PHASE_SYNC`` (a call that waits for the device, such as ``.item()``) are marked on CUDA
runs only.
"""

from __future__ import annotations

PHASE_OTHER, PHASE_DATA, PHASE_FORWARD, PHASE_BACKWARD, PHASE_OPTIMIZER, PHASE_TRANSFER, PHASE_SYNC = range(7)
