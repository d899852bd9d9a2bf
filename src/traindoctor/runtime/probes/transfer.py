"""Transfer probe: host-to-device copies (CUDA only), and CUDA step timing.

Installed only when a CUDA device is available: on a CPU run there is nothing to copy and the
probe costs nothing. It wraps ``Tensor.to`` and ``Tensor.cuda``; a call on a tensor already on the
GPU goes straight to the original. For a CPU tensor whose result lands on CUDA it reports the
bytes, the wall time of the call, whether the source was pinned, and, when the tensor was part of
the last batch a DataLoader returned, that loader (TD101 needs "batches from an unpinned loader").
Wall time of a pinned ``non_blocking`` copy is only its launch: the copy overlaps with compute,
which is the point of pinning.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.probes.base import Probe

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session

#: CUDA events recorded per run at most (one per step).
MAX_EVENTS = 100_000


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


class CudaStepClock:
    """A CUDA event at each step end; device time per step is read once, at the end of the run."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.events: list[tuple[int, Any]] = []
        self._cuda_ready: bool | None = None

    def _cuda_usable(self) -> bool:
        """CUDA events need a real CUDA runtime; a faked device (tests) or a CPU build has none."""
        if self._cuda_ready is None:
            import torch

            try:
                self._cuda_ready = bool(torch.cuda.is_available())
            except Exception:  # pragma: no cover - broken driver
                self._cuda_ready = False
        return self._cuda_ready

    def mark(self, record: Any) -> None:
        if not self.session.uses_cuda or len(self.events) >= MAX_EVENTS:
            return
        if not self._cuda_usable():
            return
        import torch

        event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        event.record()
        self.events.append((record.index, event))

    def assign(self, records: list[Any]) -> None:
        if len(self.events) < 2:
            return
        import torch

        torch.cuda.synchronize()
        by_index = {r.index: r for r in records}
        for (_, prev), (index, cur) in zip(self.events, self.events[1:]):
            rec = by_index.get(index)
            if rec is not None:
                rec.device_s = prev.elapsed_time(cur) / 1000.0


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

        self.patch(torch.Tensor, "to", self._wrap)
        self.patch(torch.Tensor, "cuda", self._wrap)
        session.add_batch_observer(self.note_batch)
        clock = CudaStepClock(session)
        session.cuda_clock = clock
        session.add_step_listener(clock.mark)

    def note_batch(self, info: Any, batch: Any) -> None:
        """Remember the data pointers of the latest batches, to recognise them when copied."""
        if len(self._batch_ptrs) > 512:
            self._batch_ptrs.clear()
        for tensor in _tensors(batch):
            if not tensor.is_cuda:
                self._batch_ptrs[tensor.data_ptr()] = info

    def copied(self, src: Any, seconds: float, t_end: float, device_type: str = "cuda") -> None:
        """Report one host-to-device copy of ``src`` (also the entry point for tests)."""
        nbytes = int(src.numel()) * int(src.element_size())
        try:
            pinned = bool(src.is_pinned())
        except Exception:
            pinned = False
        info = self._batch_ptrs.get(src.data_ptr())
        self.watched.record_transfer(nbytes, seconds, pinned, device_type, info, t_end=t_end)

    def _wrap(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        probe = self
        perf = time.perf_counter

        @functools.wraps(orig)
        def move(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if tensor.is_cuda:
                return orig(tensor, *args, **kwargs)
            t0 = perf()
            out = orig(tensor, *args, **kwargs)
            t1 = perf()
            try:
                if out is not tensor and getattr(out, "is_cuda", False):
                    probe.copied(tensor, t1 - t0, t1)
            except Exception as exc:
                probe.fail("Tensor.to", exc)
            return out

        return move
