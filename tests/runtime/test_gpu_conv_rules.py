"""TD401/TD402 fire from a real 30-step convolutional training loop on the simulated device.

The layer windows of the module probe close two steps after they open; on a run that may use
CUDA the convolution classes stay counted, so 30 training steps give 30 forwards per conv layer
(the old probe saw 2, below TD401's 8 and TD402's 8 distinct shapes).
"""

from __future__ import annotations

import pytest
import torch
from helpers.rule_loops import codes, finding
from helpers.sim_cuda import SimulatedCuda
from helpers.sim_loops import FAKE_CUDA
from torch import nn

import traindoctor


class OnDevice(nn.Module):
    """Marks its input as computed on the simulated device (the previous layer ran there)."""

    def __init__(self, sim: SimulatedCuda) -> None:
        super().__init__()
        self.sim = sim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sim.on(x, 0)


def _conv_run(shapes: list[tuple[int, int, int, int]], *, benchmark: bool, enabled: bool = True, **watch: object):
    sim = SimulatedCuda()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), OnDevice(sim), nn.Conv2d(4, 2, 3, padding=1), nn.Flatten()
    )
    sim.place(model, 0)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    before = torch.backends.cudnn.benchmark, torch.backends.cudnn.enabled
    try:
        with (
            sim.installed(),
            traindoctor.watch(device=FAKE_CUDA, cuda=sim, select=["TD401", "TD402"], **watch) as doctor,
        ):
            torch.backends.cudnn.benchmark = benchmark
            torch.backends.cudnn.enabled = enabled
            for shape in shapes:
                x = torch.randn(*shape).to("cuda")
                loss = model(x).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
    finally:
        torch.backends.cudnn.benchmark, torch.backends.cudnn.enabled = before
    return doctor


def test_td401_fires_from_a_real_30_step_conv_loop() -> None:
    doctor = _conv_run([(8, 3, 16, 16)] * 30, benchmark=False)
    f = finding(doctor, "TD401")
    assert f.evidence["conv_layers"] == 2
    assert f.evidence["conv_forwards"] == 60
    assert f.evidence["example_shape"] == [8, 3, 16, 16]


def test_td402_fires_from_a_real_30_step_conv_loop_with_changing_shapes() -> None:
    doctor = _conv_run([(8, 3, 16 + i % 10, 16) for i in range(30)], benchmark=True)
    f = finding(doctor, "TD402")
    assert f.evidence["distinct_shapes"] == 10 and f.evidence["forwards"] == 30


@pytest.mark.parametrize("benchmark", [False, True])
def test_cudnn_disabled_silences_both(benchmark: bool) -> None:
    shapes = [(8, 3, 16, 16)] * 30 if not benchmark else [(8, 3, 16 + i % 10, 16) for i in range(30)]
    assert codes(_conv_run(shapes, benchmark=benchmark, enabled=False)) == []
