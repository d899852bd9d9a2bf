"""An optimizer subclass whose ``step`` calls ``super().step()`` is one training step per call.

torch patches ``step`` once per optimizer class to run the global step hooks; once a plain ``SGD``
has been built in the process, ``SGD.step`` is patched too, so a subclass's ``step`` that calls
``super().step()`` runs the hooks twice (outer and inner). The doctor counts the outer call only,
and a step that raised (no post hook) does not make the next steps look nested."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import traindoctor


class ClippedSGD(torch.optim.SGD):
    """SGD that clips the gradients first: the common shape of a project's own optimizer."""

    def step(self, closure: Any = None) -> Any:
        for group in self.param_groups:
            torch.nn.utils.clip_grad_norm_(group["params"], 1.0)
        return super().step(closure)


def _train(opt_cls: type, steps: int) -> Any:
    torch.manual_seed(0)
    torch.optim.SGD(nn.Linear(1, 1).parameters(), lr=0.1)  # a plain SGD: SGD.step is patched now
    model = nn.Linear(4, 1)
    with traindoctor.watch() as doctor:
        opt = opt_cls(model.parameters(), lr=0.1)
        for _ in range(steps):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return doctor


def test_subclass_calling_super_step_counts_one_step_per_call() -> None:
    doctor = _train(ClippedSGD, 5)
    assert doctor.step == 5
    assert [r.backward_calls for r in doctor.records] == [1] * 5


def test_a_step_that_raised_does_not_hide_the_next_steps() -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    with traindoctor.watch() as doctor:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        failed = False
        for n in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            if n == 1:
                try:
                    opt.step(closure=lambda: 1 / 0)  # raises inside the step: no post hook runs
                except ZeroDivisionError:
                    failed = True
                continue
            opt.step()
    assert failed
    assert doctor.step == 3
