"""Training loops on the simulated asynchronous device (``sim_cuda``), watched, with their truth.

Each loop is a real CPU training loop (a DataLoader, a linear model, SGD) whose forward, backward
and optimizer step also queue simulated kernels of known durations, whose batches are copied to the
simulated device and whose ``.item()`` waits for it. :func:`run_sim_loop` returns the session and
the truth (how long the simulated device was busy, per label, over the profile's steady steps).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

import traindoctor
from helpers.sim_cuda import SimNet, SimSGD, SimulatedCuda, spin
from traindoctor.runtime.device import DeviceInfo

#: What the session believes the machine has (the simulated device's facts come from the sim).
FAKE_CUDA = DeviceInfo(type="cuda", name="CUDA device (not initialised yet)", cuda_available=True, device_count=2)

FEATURES = 8


class SlowDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """``n`` random samples; each ``__getitem__`` costs the host ``item_s``."""

    def __init__(self, n: int, item_s: float = 0.0) -> None:
        gen = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, FEATURES, generator=gen)
        self.y = torch.randn(n, 1, generator=gen)
        self.item_s = item_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        spin(self.item_s)
        return self.x[i], self.y[i]


class Truth:
    """The simulated device's busy time per steady step (seconds), overall and per label."""

    def __init__(self, sim: SimulatedCuda, device: int, steps: list[Any]) -> None:
        self.steps = len(steps)
        self.span = sum(s.gpu_span for s in steps) / max(len(steps), 1)
        self.busy: dict[str | None, float] = {}
        for label in (None, "forward", "backward", "optimizer", "copy"):
            total = sum(sim.busy(device, s.intervals[0].gpu_start, s.intervals[-1].gpu_end, label) for s in steps)
            self.busy[label] = total / max(len(steps), 1)

    @property
    def idle(self) -> float:
        return self.span - self.busy[None]


def run_sim_loop(
    *,
    steps: int = 30,
    batch: int = 4,
    fwd: tuple[int, float, float] = (1, 0.003, 0.0),
    bwd: tuple[int, float, float] = (1, 0.004, 0.0),
    opt: tuple[int, float, float] = (1, 0.001, 0.0),
    item_s: float = 0.0,
    pinned: bool = False,
    non_blocking: bool = False,
    item: bool = False,
    host_after_s: float = 0.0,
    sim: SimulatedCuda | None = None,
    device: int = 0,
    **watch_options: Any,
) -> tuple[Any, Truth, SimulatedCuda]:
    """Run a watched loop of ``steps`` steps on the simulated device (see the module docstring).

    ``fwd``/``bwd``/``opt``: (kernels, GPU seconds each, host seconds per launch); ``item_s``: the
    host cost of each sample the DataLoader reads; ``pinned``/``non_blocking``: how batches are
    copied; ``item``: ``loss.item()`` every step, then ``host_after_s`` of host work.
    """
    sim = sim or SimulatedCuda()
    model = sim.place(SimNet(sim, fwd, bwd, FEATURES, device), device)
    optimizer = SimSGD(model.parameters(), sim, opt, device=device)
    loader = DataLoader(SlowDataset(steps * batch, item_s), batch_size=batch)
    target = torch.device("cuda", device)
    with sim.installed(), traindoctor.watch(device=FAKE_CUDA, cuda=sim, **watch_options) as session:
        for x, y in loader:
            if pinned:
                x._sim_pinned = y._sim_pinned = True  # type: ignore[attr-defined]
            x = x.to(target, non_blocking=non_blocking)
            y = y.to(target, non_blocking=non_blocking)
            loss = model(x, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if item:
                loss.item()
                spin(host_after_s)
    timer = session.gpu.timer if session.gpu is not None else None
    warm = session.profile.warmup_steps
    timed = [s for s in timer.steps if s.index > warm] if timer is not None else []
    return session, Truth(sim, device, timed), sim
