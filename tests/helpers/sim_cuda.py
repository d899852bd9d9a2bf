"""A simulated asynchronous CUDA device for the runtime tests (the package never uses it).

It has what makes a GPU profile hard, and the truth to check one against: every kernel and copy
has a known duration and runs *behind* the host, in stream order, starting when the host queued it
or when the stream finished the work before it, whichever is later; a launch blocks once
:data:`QUEUE_DEPTH` operations are waiting (as CUDA's launch queue does); an event completes when
the stream gets to it; ``elapsed_time`` needs both events complete and on one device; a blocking
copy waits for everything queued before it on its stream and holds the host while it runs; a
non-blocking copy from pinned memory frees the host but still runs between the kernels of its
stream; ``.item()`` on a device tensor waits for the stream to drain.

:class:`SimulatedCuda` is a :class:`traindoctor.runtime.device_api.DeviceApi` (hand it to
``watch(cuda=sim)``) and, while :meth:`SimulatedCuda.installed` is active, the device behind
``Tensor.to("cuda")`` and ``Tensor.item()``, and its clock is ``time.perf_counter`` (a simulated
host clock, see :data:`_clock`): a tensor "on the device" is a CPU tensor tagged with
``_sim_device``; the host really computes with it, the device only keeps time. The test loops
queue their kernels with :meth:`SimulatedCuda.launch` (from a model's forward, an autograd
function's backward, an optimizer's step). :meth:`SimulatedCuda.busy` is the truth: how long the
device was busy in a window of host time, per label.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch

#: Seconds from queuing an operation to the device starting it (when the stream is idle).
LATENCY = 5e-6
#: Operations that may wait on a stream before a launch blocks.
QUEUE_DEPTH = 1024

_real_perf = time.perf_counter
#: The simulation's host clock (seconds): it starts at the real clock and advances only by the
#: host work and waits the simulation models (:func:`spin`, :func:`wait_until`), plus
#: :data:`TICK` per reading, never by how long Python really took. The loops are then
#: deterministic: a shared, loaded machine that preempts the test changes nothing.
_clock = [_real_perf()]
#: Host time one reading of the clock costs (so that no two readings are equal).
TICK = 1e-7


def _perf() -> float:
    """The host clock of the simulation; while :meth:`SimulatedCuda.installed` is active it *is*
    ``time.perf_counter`` (the doctor's too)."""
    _clock[0] += TICK
    return _clock[0]


def wait_until(t: float) -> None:
    """The host waits for the device until ``t`` (the clock jumps there: a synchronisation
    returns exactly when the device is done, as CUDA's spinning wait does)."""
    _clock[0] = max(_clock[0], t)


def spin(seconds: float) -> None:
    """Host work that takes ``seconds`` (a launch's or a Python loop's cost)."""
    _clock[0] += max(seconds, 0.0)


class SimStream:
    """A queue on one device: ``tail`` is when the work queued so far ends (host clock)."""

    def __init__(self, gpu: SimGpu) -> None:
        self.gpu = gpu
        self.tail = 0.0
        self.ends: deque[float] = deque()


class SimGpu:
    """One simulated device: its default stream, an idle side stream and what ran on it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.default = SimStream(self)
        self.side = SimStream(self)
        #: (start, end, label) of every kernel and copy.
        self.ops: list[tuple[float, float, str]] = []
        #: Calls of the API that named this device (a context would be created there).
        self.touched = 0


class SimEvent:
    """A timing event: completes when its stream gets to it."""

    def __init__(self) -> None:
        self.t: float | None = None
        self.device: int | None = None

    def record(self, stream: SimStream) -> None:
        self.t = max(_perf() + LATENCY, stream.tail)
        self.device = stream.gpu.index

    def query(self) -> bool:
        return self.t is not None and _perf() >= self.t

    def elapsed_time(self, end: SimEvent) -> float:
        if not (self.query() and end.query()):
            raise RuntimeError("CUDA error: device not ready")
        if self.device != end.device:
            raise RuntimeError("CUDA error: invalid resource handle (events on different devices)")
        assert self.t is not None and end.t is not None
        return (end.t - self.t) * 1000.0


class SimulatedCuda:
    """The simulated device(s) and the :class:`~traindoctor.runtime.device_api.DeviceApi` over them."""

    platform = "CUDA"

    def __init__(
        self,
        devices: int = 1,
        current: int = 0,
        pageable_gbps: float = 6.0,
        pinned_gbps: float = 24.0,
        name: str = "Simulated H100 80GB HBM3",
        capability: tuple[int, int] = (9, 0),
        total_memory: int = 80 * 2**30,
    ) -> None:
        self.gpus = [SimGpu(i) for i in range(devices)]
        self.current = current
        self.pageable_bps = pageable_gbps * 1e9
        self.pinned_bps = pinned_gbps * 1e9
        self.name, self.capability, self.total_memory = name, capability, total_memory
        self.initialized = True
        self.stats: dict[str, Any] = {
            "allocated_bytes.all.current": 0,
            "allocated_bytes.all.peak": 0,
            "reserved_bytes.all.current": 0,
            "reserved_bytes.all.peak": 0,
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }
        self.syncs = 0

    # ---------------------------------------------------------------- DeviceApi
    def ready(self) -> bool:
        return self.initialized

    def on_device(self, tensor: Any) -> bool:
        return getattr(tensor, "_sim_device", None) is not None

    def device_of(self, tensor: Any) -> int | None:
        return getattr(tensor, "_sim_device", None)

    def is_pinned(self, tensor: Any) -> bool:
        return bool(getattr(tensor, "_sim_pinned", False))

    def current_device(self) -> int:
        return self.current

    def _gpu(self, device: int) -> SimGpu:
        gpu = self.gpus[device]
        gpu.touched += 1
        return gpu

    def stream(self, device: int) -> SimStream:
        return self._gpu(device).default

    def side_stream(self, device: int) -> SimStream:
        return self._gpu(device).side

    def event(self) -> SimEvent:
        return SimEvent()

    def capturing(self) -> bool:
        return False

    def memory_stats(self, device: int) -> dict[str, Any]:
        self._gpu(device)
        return dict(self.stats)

    def memory_allocated(self, device: int) -> int:
        self._gpu(device)
        return int(self.stats["allocated_bytes.all.current"])

    def properties(self, device: int) -> tuple[str, tuple[int, int], int]:
        self._gpu(device)
        return self.name, self.capability, self.total_memory

    def synchronize(self, device: int) -> None:
        gpu = self._gpu(device)
        wait_until(max(gpu.default.tail, gpu.side.tail))

    # ---------------------------------------------------------------- the simulated work
    def _enqueue(self, stream: SimStream, seconds: float, label: str) -> float:
        now = _perf()
        ends = stream.ends
        while ends and ends[0] <= now:
            ends.popleft()
        if len(ends) >= QUEUE_DEPTH:  # the launch queue is full: the host waits for room
            wait_until(ends.popleft())
            now = _perf()
        start = max(now + LATENCY, stream.tail)
        end = start + seconds
        stream.tail = end
        ends.append(end)
        stream.gpu.ops.append((start, end, label))
        return end

    def launch(self, label: str, gpu_s: float, host_s: float = 0.0, count: int = 1, device: int | None = None) -> None:
        """Queue ``count`` kernels of ``gpu_s`` each; each launch costs the host ``host_s``."""
        stream = self.gpus[self.current if device is None else device].default
        for _ in range(count):
            spin(host_s)
            self._enqueue(stream, gpu_s, label)

    def sync(self, device: int | None = None) -> None:
        """Hold the host until the device's default stream has run everything queued."""
        self.syncs += 1
        wait_until(self.gpus[self.current if device is None else device].default.tail)

    def copy_to_device(self, tensor: torch.Tensor, device: int, non_blocking: bool) -> torch.Tensor:
        """``tensor.to(device)``: a tagged clone, after the simulated copy (see the module docstring)."""
        stream = self.gpus[device].default
        pinned = self.is_pinned(tensor)
        nbytes = tensor.numel() * tensor.element_size()
        seconds = nbytes / (self.pinned_bps if pinned else self.pageable_bps)
        if pinned and non_blocking:
            self._enqueue(stream, seconds, "copy")  # frees the host, still ordered on the stream
        else:
            wait_until(stream.tail)  # a blocking copy waits for the work queued before it
            wait_until(self._enqueue(stream, seconds, "copy"))
        out = tensor.detach().clone()
        out._sim_device = device  # type: ignore[attr-defined]
        return out

    def busy(self, device: int, start: float, end: float, label: str | None = None) -> float:
        """Truth: seconds the device ran operations (of ``label``) inside ``[start, end]``."""
        total = 0.0
        for s, e, lab in self.gpus[device].ops:
            if label is None or lab == label:
                total += max(0.0, min(e, end) - max(s, start))
        return total

    def place(self, module: torch.nn.Module, device: int) -> torch.nn.Module:
        """Mark a model's parameters as living on ``device`` (``model.to(device)``)."""
        for p in module.parameters():
            p._sim_device = device  # type: ignore[attr-defined]
        return module

    def on(self, tensor: torch.Tensor, device: int | None = None) -> torch.Tensor:
        """Mark a tensor computed on the device (a loss, a model output)."""
        tensor._sim_device = self.current if device is None else device  # type: ignore[attr-defined]
        return tensor

    # ---------------------------------------------------------------- torch's entry points
    def _destination(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
        dest = kwargs.get("device", args[0] if args else None)
        if isinstance(dest, int) and not isinstance(dest, bool):
            return dest
        if isinstance(dest, str) and dest.startswith("cuda"):
            dest = torch.device(dest)
        if isinstance(dest, torch.device) and dest.type == "cuda":
            return self.current if dest.index is None else int(dest.index)
        return None

    @contextlib.contextmanager
    def installed(self) -> Iterator[SimulatedCuda]:
        """``Tensor.to("cuda")`` copies to the simulated device; ``Tensor.item()`` of a device
        tensor waits for it. Install it before the watch starts (the doctor wraps these)."""
        sim = self
        original_to, original_item, own_bool = torch.Tensor.to, torch.Tensor.item, vars(torch.Tensor).get("__bool__")
        original_bool = torch.Tensor.__bool__

        def to(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            device = sim._destination(args, kwargs)
            if device is None:
                return original_to(tensor, *args, **kwargs)
            if sim.device_of(tensor) == device:
                return tensor
            return sim.copy_to_device(tensor, device, bool(kwargs.get("non_blocking", False)))

        def item(tensor: torch.Tensor) -> Any:
            if sim.on_device(tensor):
                sim.sync(sim.device_of(tensor))
            return original_item(tensor)

        def as_bool(tensor: torch.Tensor) -> bool:  # ``if loss > x:`` waits like ``.item()``
            if sim.on_device(tensor):
                sim.sync(sim.device_of(tensor))
            return original_bool(tensor)

        torch.Tensor.to = to  # type: ignore[method-assign]
        torch.Tensor.item = item  # type: ignore[method-assign]
        torch.Tensor.__bool__ = as_bool  # type: ignore[method-assign]
        _clock[0] = max(_clock[0], _real_perf())
        time.perf_counter = _perf
        try:
            yield self
        finally:
            time.perf_counter = _real_perf
            torch.Tensor.to = original_to  # type: ignore[method-assign]
            torch.Tensor.item = original_item  # type: ignore[method-assign]
            if own_bool is None:
                del torch.Tensor.__bool__
            else:  # pragma: no cover - torch defines it on TensorBase
                torch.Tensor.__bool__ = own_bool  # type: ignore[method-assign]


class SimBackwardKernels(torch.autograd.Function):
    """Identity whose backward queues simulated kernels (a layer's backward GPU work)."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, sim: SimulatedCuda, bwd: tuple[int, float, float], device: int
    ) -> torch.Tensor:  # type: ignore[override]
        ctx.sim, ctx.bwd, ctx.device = sim, bwd, device
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        count, gpu_s, host_s = ctx.bwd
        ctx.sim.launch("backward", gpu_s, host_s, count, ctx.device)
        return grad, None, None, None


class SimNet(torch.nn.Module):
    """A real linear model whose forward and backward also queue simulated kernels; it returns
    its loss (on the device), as nanoGPT's model does. The forward kernels are queued first (on a
    GPU the host's forward is little more than their launches); then the host really computes."""

    def __init__(
        self,
        sim: SimulatedCuda,
        fwd: tuple[int, float, float],
        bwd: tuple[int, float, float],
        features: int = 8,
        device: int = 0,
    ) -> None:
        super().__init__()
        self.sim, self.fwd, self.bwd, self.device = sim, fwd, bwd, device
        self.lin = torch.nn.Linear(features, 1)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        count, gpu_s, host_s = self.fwd
        self.sim.launch("forward", gpu_s, host_s, count, self.device)
        out = SimBackwardKernels.apply(self.lin(x), self.sim, self.bwd, self.device)
        return self.sim.on(torch.nn.functional.mse_loss(out, y), self.device)


class SimSGD(torch.optim.Optimizer):
    """Plain SGD whose step also queues simulated kernels (``count`` x ``gpu_s``, ``host_s`` per
    launch). It derives from ``Optimizer`` itself: a subclass of ``SGD`` calling ``super().step()``
    would run torch's step hooks twice once a plain ``SGD`` has been built in the process."""

    def __init__(
        self, params: Any, sim: SimulatedCuda, kernels: tuple[int, float, float], lr: float = 0.01, device: int = 0
    ) -> None:
        super().__init__(params, {"lr": lr})
        self.sim, self.kernels, self.device = sim, kernels, device

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        count, gpu_s, host_s = self.kernels
        self.sim.launch("optimizer", gpu_s, host_s, count, self.device)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])
        return None
