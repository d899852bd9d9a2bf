"""TD803 at run time: real CPU loops (the rule is not GPU-only).

``zero_grad(set_to_none=False)`` fires on both optimizer and module ``zero_grad``; the default
``zero_grad()`` and a loop that never zeroes (TD208's case, not this one) stay silent.
"""

from __future__ import annotations

import pytest
import torch
from helpers.rule_loops import codes, finding

import traindoctor


def _loop(zero: str, steps: int = 6):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)
    with traindoctor.watch(select=["TD803"]) as doctor:
        for _ in range(steps):
            if zero == "optimizer-false":
                opt.zero_grad(set_to_none=False)
            elif zero == "module-false":
                model.zero_grad(False)
            elif zero == "default":
                opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    return doctor


@pytest.mark.parametrize("zero", ["optimizer-false", "module-false"])
def test_zero_filled_gradients_fire(zero: str) -> None:
    f = finding(_loop(zero), "TD803")
    # steps 1-4 are sampled; each watch closes at the next step (the 5th and 6th close 4 and 5)
    assert f.evidence["sampled_steps"] == f.evidence["zero_filled_steps"] == 4
    n_params = 16 * 32 + 32 + 32 + 1
    assert f.evidence["grad_mib"] == pytest.approx(n_params * 4 / 2**20, abs=1e-3)


@pytest.mark.parametrize("zero", ["default", "never"])
def test_released_or_never_zeroed_gradients_stay_silent(zero: str) -> None:
    assert "TD803" not in codes(_loop(zero))
