"""TD802 at run time: real torch optimizers over a model on the simulated asynchronous device.

Each optimizer step also queues simulated kernels (a step pre-hook on the optimizer: the
doctor's global hook has marked the optimizer phase by then): 40 x 20 us, against 0.3 ms of
forward and 0.5 ms of backward kernels, so the optimizer is about half the GPU's step time.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from helpers.rule_loops import codes, finding
from helpers.sim_cuda import SimNet, SimulatedCuda
from helpers.sim_loops import FAKE_CUDA

import traindoctor


def _run(make: Any, kernels: tuple[int, float] = (40, 20e-6), steps: int = 12):
    sim = SimulatedCuda()
    model = sim.place(SimNet(sim, (1, 3e-4, 0.0), (1, 5e-4, 0.0)), 0)
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    with sim.installed(), traindoctor.watch(device=FAKE_CUDA, cuda=sim, select=["TD802"]) as doctor:
        opt = make(model.parameters())
        opt.register_step_pre_hook(lambda *_: sim.launch("optimizer", kernels[1], count=kernels[0]))
        for _ in range(steps):
            loss = model(x.to("cuda"), y.to("cuda"))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return doctor


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (lambda p: torch.optim.AdamW(p, lr=1e-3), "foreach"),
        (lambda p: torch.optim.SGD(p, lr=1e-3, foreach=False), "for-loop"),
    ],
    ids=["adamw-default", "sgd-foreach-false"],
)
def test_per_tensor_optimizer_with_a_visible_step_fires(make: Any, kind: str) -> None:
    doctor = _run(make)
    f = finding(doctor, "TD802")
    assert f.evidence["implementation"] == kind
    assert 0.3 < f.evidence["optimizer_share"] < 0.7, f.evidence
    assert f.evidence["param_tensors"] == 2
    assert f.filename == __file__ and f.location is not None
    line = open(__file__, encoding="utf-8").read().splitlines()[f.location.row - 1]
    assert "torch.optim." in line  # where the optimizer was built (the parametrize lambda)
    assert ("fused=True" in f.message) and (("foreach=False" in f.message) == (kind == "for-loop"))


@pytest.mark.parametrize(
    ("make", "kernels"),
    [
        (lambda p: torch.optim.AdamW(p, lr=1e-3, fused=True), (40, 20e-6)),
        (lambda p: torch.optim.SGD(p, lr=1e-3), (40, 20e-6)),
        (lambda p: torch.optim.AdamW(p, lr=1e-3), (2, 10e-6)),
    ],
    ids=["adamw-fused", "sgd-default-foreach", "adamw-small-step"],
)
def test_fused_multi_tensor_or_small_steps_stay_silent(make: Any, kernels: tuple[int, float]) -> None:
    doctor = _run(make, kernels)
    assert doctor.gpu_profile is not None and doctor.gpu_profile.busy["optimizer"] > 0
    assert "TD802" not in codes(doctor)


def test_a_cpu_run_never_fires() -> None:
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    with traindoctor.watch(select=["TD802"]) as doctor:
        for _ in range(6):
            loss = model(torch.randn(4, 8)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert "TD802" not in codes(doctor)
