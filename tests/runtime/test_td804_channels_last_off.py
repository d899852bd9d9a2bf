"""TD804 at run time: a real two-conv CNN loop whose kernels run on the simulated device.

The convolutions are about 94% of the model's FLOPs and the simulated GPU computes most of its
step (0.3 ms forward and 0.5 ms backward kernels), so they dominate its time. Channels-last
weights, no autocast, a GPU without Tensor Cores and a Linear-dominated model stay silent; so
does a CPU run.
"""

from __future__ import annotations

import pytest
import torch
from helpers.rule_loops import codes, finding
from helpers.sim_cuda import SimulatedCuda
from helpers.sim_loops import FAKE_CUDA
from torch import nn

import traindoctor


class SimKernels(nn.Module):
    """Queues the step's simulated kernels and marks its input as a device tensor."""

    def __init__(self, sim: SimulatedCuda) -> None:
        super().__init__()
        self.sim = sim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.sim.launch("forward", 3e-4)
        self.sim.launch("backward", 5e-4)
        return self.sim.on(x, 0)


def _run(*, channels_last: bool = False, autocast: bool = True, capability: tuple[int, int] = (8, 0), head: int = 10):
    sim = SimulatedCuda(capability=capability)
    torch.manual_seed(0)
    model = nn.Sequential(
        SimKernels(sim),
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        _Tag(sim),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.Flatten(),
        _Tag(sim),
        nn.Linear(16 * 8 * 8, head),
    )
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    sim.place(model, 0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with sim.installed(), traindoctor.watch(device=FAKE_CUDA, cuda=sim, select=["TD804"]) as doctor:
        for _ in range(12):
            if autocast:
                doctor.emit("on_autocast_enter", "cuda", torch.bfloat16)
            loss = model(torch.randn(8, 3, 8, 8).to("cuda")).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return doctor


class _Tag(nn.Module):
    def __init__(self, sim: SimulatedCuda) -> None:
        super().__init__()
        self.sim = sim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sim.on(x, 0)


def test_nchw_cnn_under_autocast_fires_with_the_conv_share() -> None:
    f = finding(_run(), "TD804")
    ev = f.evidence
    conv = 3 * (2 * 3 * 9 * 16 * 64 * 8 + 2 * 16 * 9 * 16 * 64 * 8)
    linear = 3 * 2 * 8 * 1024 * 10
    assert ev["conv_flop_share"] == pytest.approx(conv / (conv + linear), abs=1e-3)
    assert ev["conv_share"] == pytest.approx(ev["conv_flop_share"] * ev["compute_share"], abs=2e-3)
    assert ev["conv_share"] >= 0.5 and ev["conv2d_layers"] == 2
    assert "channels_last" in f.message


@pytest.mark.parametrize(
    "kwargs",
    [{"channels_last": True}, {"autocast": False}, {"capability": (6, 1)}, {"head": 4096}],
    ids=["channels-last", "fp32", "pascal", "linear-dominated"],
)
def test_healthy_twins_stay_silent(kwargs) -> None:
    doctor = _run(**kwargs)
    assert doctor.gpu_profile is not None and doctor.gpu_profile.span > 0
    assert "TD804" not in codes(doctor)


def test_a_cpu_run_never_fires() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with traindoctor.watch(select=["TD804"]) as doctor:
        for _ in range(6):
            doctor.emit("on_autocast_enter", "cuda", torch.bfloat16)
            loss = model(torch.randn(2, 3, 8, 8)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert "TD804" not in codes(doctor)
