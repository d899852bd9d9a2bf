"""The CUDA calls the runtime makes, behind one small object that tests replace.

Everything the doctor asks of CUDA while a run is watched (streams, events, memory statistics,
device properties) goes through a :class:`DeviceApi`. The real one, :class:`TorchCuda`, calls
``torch.cuda``; the tests hand the session a simulated asynchronous device with the same methods
(``tests/helpers/sim_cuda.py``), whose kernels have known durations and run behind the host, so
the attribution logic is tested on a CPU against known truth.

Two rules hold for every caller:

* **Nothing initialises CUDA.** :meth:`DeviceApi.ready` says whether the *script* has initialised
  CUDA (``torch.cuda.is_initialized()``, which itself initialises nothing); every other method is
  called only after it said yes. A watch that initialised CUDA by itself would make a script that
  later forks CUDA workers fail ("Cannot re-initialize CUDA in forked subprocess") only under the
  doctor.
* **The device is named, never the current one.** Streams, events and memory calls take the index
  of the device the model lives on: a DDP script that moves its model with ``.to(rank)`` without
  ``torch.cuda.set_device(rank)`` keeps device 0 current on every rank, and a call without a device
  would time GPU 0 and create a context there.

This module imports torch lazily (inside the methods).
"""

from __future__ import annotations

from typing import Any, Protocol


class Event(Protocol):
    """A CUDA event with timing enabled (``torch.cuda.Event(enable_timing=True)``)."""

    def record(self, stream: Any) -> None:
        """Record the event on ``stream`` (returns at once; the device reaches it later)."""
        ...

    def query(self) -> bool:
        """Whether the device has reached the event (never blocks)."""
        ...

    def elapsed_time(self, end: Any) -> float:
        """Milliseconds from this event to ``end`` (both complete, on the same device)."""
        ...


class DeviceApi(Protocol):
    """What the device-time machinery needs of CUDA (see the module docstring)."""

    #: Name of the platform, for the report: ``"CUDA"`` or ``"ROCm"``.
    platform: str

    def ready(self) -> bool:
        """Whether the script has initialised CUDA (so that the other calls initialise nothing)."""
        ...

    def on_device(self, tensor: Any) -> bool:
        """Whether ``tensor`` lives on this API's accelerator."""
        ...

    def device_of(self, tensor: Any) -> int | None:
        """The device index of an accelerator tensor (None for a host tensor)."""
        ...

    def is_pinned(self, tensor: Any) -> bool:
        """Whether a host tensor is in page-locked memory."""
        ...

    def current_device(self) -> int:
        """The index of the current device (only after :meth:`ready`)."""
        ...

    def stream(self, device: int) -> Any:
        """The current stream of ``device``: the one the script's work on that device runs on."""
        ...

    def side_stream(self, device: int) -> Any:
        """A stream of ``device`` with no work queued and no ordering with the script's streams
        (a non-blocking stream): an event recorded there completes at once, which pins the
        device clock to the host clock."""
        ...

    def event(self) -> Event:
        """A new timing event."""
        ...

    def capturing(self) -> bool:
        """Whether the current stream is capturing a CUDA graph (no event may be recorded)."""
        ...

    def memory_stats(self, device: int) -> dict[str, Any]:
        """``torch.cuda.memory_stats(device)`` (flat keys such as ``"allocated_bytes.all.peak"``)."""
        ...

    def memory_allocated(self, device: int) -> int:
        """Bytes allocated by tensors on ``device`` now (does not synchronise)."""
        ...

    def properties(self, device: int) -> tuple[str, tuple[int, int], int]:
        """(name, compute capability, total memory in bytes) of ``device``."""
        ...

    def synchronize(self, device: int) -> None:
        """Wait until ``device`` has finished all queued work (only at the end of the watch)."""
        ...


class TorchCuda:
    """The :class:`DeviceApi` of the real ``torch.cuda`` (NVIDIA CUDA or AMD ROCm)."""

    def __init__(self) -> None:
        import torch

        #: ``torch.cuda`` as ``Any``: several of its functions are unannotated.
        self._cuda: Any = torch.cuda
        self._side: dict[int, Any] = {}
        self.platform = "ROCm" if getattr(torch.version, "hip", None) else "CUDA"

    def ready(self) -> bool:
        try:
            return bool(self._cuda.is_initialized())
        except Exception:  # pragma: no cover - a broken driver
            return False

    def on_device(self, tensor: Any) -> bool:
        return bool(getattr(tensor, "is_cuda", False))

    def device_of(self, tensor: Any) -> int | None:
        if not getattr(tensor, "is_cuda", False):
            return None
        index = tensor.device.index
        return int(index) if index is not None else None

    def is_pinned(self, tensor: Any) -> bool:
        try:
            return bool(tensor.is_pinned())
        except Exception:
            return False

    def current_device(self) -> int:
        return int(self._cuda.current_device())

    def stream(self, device: int) -> Any:
        return self._cuda.current_stream(device)

    def side_stream(self, device: int) -> Any:
        stream = self._side.get(device)
        if stream is None:
            # PyTorch creates its streams non-blocking: no implicit ordering with the default stream.
            stream = self._side[device] = self._cuda.Stream(device=device)
        return stream

    def event(self) -> Event:
        event: Event = self._cuda.Event(enable_timing=True)
        return event

    def capturing(self) -> bool:
        return bool(self._cuda.is_current_stream_capturing())

    def memory_stats(self, device: int) -> dict[str, Any]:
        return dict(self._cuda.memory_stats(device))

    def memory_allocated(self, device: int) -> int:
        return int(self._cuda.memory_allocated(device))

    def properties(self, device: int) -> tuple[str, tuple[int, int], int]:
        props = self._cuda.get_device_properties(device)
        return str(props.name), (int(props.major), int(props.minor)), int(props.total_memory)

    def synchronize(self, device: int) -> None:
        self._cuda.synchronize(device)
