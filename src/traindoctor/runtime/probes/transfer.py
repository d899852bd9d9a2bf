"""Transfer probe: host-to-device copies (CUDA only).

Installed only when a CUDA device may be used: on a CPU run there is nothing to copy and the probe
costs nothing. It wraps ``Tensor.to`` and ``Tensor.cuda``; a call on a tensor already on the device
goes straight to the original (a device-to-host ``.to("cpu")`` is marked as a synchronisation on
timed steps). For a host tensor whose result lands on the device it reports the bytes, the host
time of the call, whether the source was pinned, and, when the tensor was part of a batch a
DataLoader returned, that loader (TD101 needs "batches from an unpinned loader"). The first copy
also tells the session which device the script works on (its model's, which need not be the
current one).

Host time is not copy time. A blocking copy (from pageable memory, or ``non_blocking=False``) first
waits for every kernel queued before it on its stream, so its host time is mostly the previous
step's compute; a non-blocking copy from pinned memory returns at once (it frees the host) and
still runs between the kernels of its stream. The copy's own time is device time: on timed steps
the copy is bracketed by the device timer's events (:mod:`traindoctor.runtime.device_time`), and
the profile and TD101 read it from there.

A call that waits for the device (``.item()``, ``.tolist()``, ``.cpu()``, a blocking
device-to-host ``.to("cpu")``) is timed on the host on every step: that wait is the profile's
"waiting for the GPU (sync)" row (``Session.record_sync``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.device_time import BLOCKING
from traindoctor.runtime.live import user_site
from traindoctor.runtime.phases import PHASE_SYNC, PHASE_TRANSFER
from traindoctor.runtime.probes.base import Probe

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session


def _tensors(batch: Any, depth: int = 0) -> list[Any]:
    if hasattr(batch, "data_ptr") and hasattr(batch, "is_cuda"):
        return [batch]
    out: list[Any] = []
    if depth < 2:
        if isinstance(batch, (list, tuple)):
            for item in batch[:16]:
                out.extend(_tensors(item, depth + 1))
        elif isinstance(batch, dict):
            for item in list(batch.values())[:16]:
                out.extend(_tensors(item, depth + 1))
    return out


def _to_host(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``Tensor.to(*args, **kwargs)`` names the CPU as its destination."""
    dest = kwargs.get("device", args[0] if args else None)
    if isinstance(dest, str):
        return dest == "cpu"
    return getattr(dest, "type", None) == "cpu"


def _to_device(api: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``Tensor.to``/``Tensor.cuda`` with these arguments names an accelerator (a dtype
    conversion on the host is no copy)."""
    if name == "cuda":
        return True
    dest = kwargs.get("device", args[0] if args else None)
    if isinstance(dest, bool) or dest is None:
        return False
    if isinstance(dest, int):
        return True
    if isinstance(dest, str):
        return dest.startswith("cuda")
    if getattr(dest, "type", None) == "cuda":  # a torch.device
        return True
    return hasattr(dest, "data_ptr") and api.on_device(dest)  # ``x.to(other_tensor)``


def _non_blocking(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    if "non_blocking" in kwargs:
        return bool(kwargs["non_blocking"])
    # ``Tensor.cuda(device, non_blocking)``; ``Tensor.to`` takes it by keyword in practice
    return name == "cuda" and len(args) > 1 and args[1] is True


#: ``Tensor`` methods that wait for the device when called on a device tensor (``__bool__``: a
#: tensor-valued ``if``).
SYNC_METHODS = ("item", "tolist", "cpu", "__bool__")


class TransferProbe(Probe):
    """Times host-to-device copies of tensors."""

    name = "transfer"
    order = 40

    def __init__(self) -> None:
        super().__init__()
        self._batch_ptrs: dict[int, Any] = {}

    def applies(self, session: Session) -> bool:
        return bool(session.device.cuda_available)

    def install(self, session: Session) -> None:
        super().install(session)
        import torch

        self.patch(torch.Tensor, "to", functools.partial(self._wrap, name="to"))
        self.patch(torch.Tensor, "cuda", functools.partial(self._wrap, name="cuda"))
        for name in SYNC_METHODS:
            self.patch(torch.Tensor, name, self._wrap_sync)
        session.add_batch_observer(self.note_batch)

    def note_batch(self, info: Any, batch: Any) -> None:
        """Remember the data pointers of the latest batches, to recognise them when copied."""
        if len(self._batch_ptrs) > 512:
            self._batch_ptrs.clear()
        on_device = self.watched.cuda_api.on_device if self.watched.cuda_api is not None else None
        for tensor in _tensors(batch):
            if on_device is None or not on_device(tensor):
                self._batch_ptrs[tensor.data_ptr()] = info

    def loader_of(self, src: Any) -> Any:
        """The loader whose last batches held ``src`` (None when it came from elsewhere)."""
        return self._batch_ptrs.get(src.data_ptr())

    def copied(
        self, src: Any, seconds: float, t_end: float, device_type: str = "cuda", device: int | None = None
    ) -> None:
        """Report one host-to-device copy of ``src`` (also the entry point for tests)."""
        session = self.watched
        nbytes = int(src.numel()) * int(src.element_size())
        api = session.cuda_api
        if api is not None:
            pinned = api.is_pinned(src)
        else:
            try:
                pinned = bool(src.is_pinned())
            except Exception:
                pinned = False
        if device is not None:
            session.note_cuda_device(device)
        session.record_transfer(nbytes, seconds, pinned, device_type, self.loader_of(src), t_end=t_end)

    def _wrap(self, orig: Callable[..., Any], *, name: str) -> Callable[..., Any]:
        probe = self
        session = self.watched
        timer = session.timer
        perf = time.perf_counter

        @functools.wraps(orig)
        def move(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            entered = perf()
            api = session.cuda_api
            if api is None:
                return orig(tensor, *args, **kwargs)
            clock = session.device_timer
            if api.on_device(tensor):
                if not _to_host(args, kwargs):
                    return orig(tensor, *args, **kwargs)
                blocks = not kwargs.get("non_blocking")  # a device-to-host copy waits for the device
                marked = clock is not None and clock.timing
                phase = timer.phase
                if marked and clock is not None:
                    clock.mark(PHASE_SYNC, BLOCKING if blocks else 0, user_site(2))
                if blocks:
                    timer.phase = PHASE_SYNC  # the host-work sampler leaves the wait alone
                t0 = perf()
                try:
                    return orig(tensor, *args, **kwargs)
                finally:
                    t1 = perf()
                    if blocks:
                        timer.phase = phase
                        session.record_sync(t1 - t0, phase)
                    if marked and clock is not None and clock.timing:
                        clock.mark(phase)
                    timer.self_total += t0 - entered + perf() - t1  # the doctor's own work
            timed = clock is not None and clock.timing and _to_device(api, name, args, kwargs)
            phase = timer.phase
            if timed and clock is not None:
                blocking = not (_non_blocking(name, args, kwargs) and api.is_pinned(tensor))
                loader = probe.loader_of(tensor)
                clock.mark(PHASE_TRANSFER, BLOCKING if blocking else 0, None if loader is None else loader.id)
            timer.phase = PHASE_TRANSFER
            inner = timer.self_total
            t0 = perf()
            try:
                out = orig(tensor, *args, **kwargs)
            finally:
                t1 = perf()
                timer.phase = phase
                if timed and clock is not None and clock.timing:
                    clock.mark(phase)
            try:
                if out is not tensor and api.on_device(out):
                    probe.copied(tensor, t1 - t0 - (timer.self_total - inner), t1, device=api.device_of(out))
            except Exception as exc:
                probe.fail("Tensor.to", exc)
            timer.self_total += t0 - entered + perf() - t1  # the doctor's own work
            return out

        return move

    def _wrap_sync(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        """``.item()``, ``.tolist()``, ``.cpu()``, ``bool()`` of a device tensor wait for the device: on timed
        steps they are marked as a synchronisation, tagged with the user's line."""
        session = self.watched
        timer = session.timer
        perf = time.perf_counter

        @functools.wraps(orig)
        def sync(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            entered = perf()
            api = session.cuda_api
            if api is None or not api.on_device(tensor):
                return orig(tensor, *args, **kwargs)
            clock = session.device_timer
            marked = clock is not None and clock.timing
            phase = timer.phase
            if marked and clock is not None:
                clock.mark(PHASE_SYNC, BLOCKING, user_site(2))
            timer.phase = PHASE_SYNC  # the host-work sampler leaves the wait alone
            t0 = perf()
            try:
                return orig(tensor, *args, **kwargs)
            finally:
                t1 = perf()
                timer.phase = phase
                session.record_sync(t1 - t0, phase)
                if marked and clock is not None and clock.timing:
                    clock.mark(phase)
                timer.self_total += t0 - entered + perf() - t1  # the doctor's own work

        return sync
