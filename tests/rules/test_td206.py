"""TD206 large-batch-without-warmup: static and runtime.

The effective batch, warmup, LBFGS closures that are no accumulation.
"""

from __future__ import annotations

import torch
from helpers.rule_loops import codes, finding, mlp, train_epoch, vector_loader
from helpers.scripts import BN_ACCUM
from helpers.snippets import check_findings, check_rows
from torch import nn

import traindoctor


# ------------------------------------------------------------------ traindoctor check
def test_td206_uses_the_effective_batch():
    found = check_findings(BN_ACCUM.format(accum=8, batch=256), ["TD206"])
    assert [f.location.row for f in found] == [10]
    assert "256 x 8 = 2048" in found[0].message
    assert check_rows(BN_ACCUM.format(accum=2, batch=256), ["TD206"]) == []


def test_td206_silent_with_any_warmup():
    src = BN_ACCUM.format(accum=1, batch=4096) + "warmup_steps = 500\n"
    assert check_rows(src, ["TD206"]) == []
    assert check_rows(BN_ACCUM.format(accum=1, batch=4096), ["TD206"]) == [("TD206", 10)]


# ------------------------------------------------------------------ traindoctor run
def test_td206_large_batch_starts_at_peak_lr() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with traindoctor.watch(select=["TD206"]) as doctor:
        train_epoch(model, opt, vector_loader(1024))
    ev = finding(doctor, "TD206").evidence
    assert ev["effective_batch"] == 1024 and ev["first_lrs"] == [0.5, 0.5, 0.5]


def test_td206_silent_with_warmup_or_small_batch() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=3)
    with traindoctor.watch(select=["TD206"]) as a:
        train_epoch(model, opt, vector_loader(1024), sched=warm)
    opt2 = torch.optim.SGD(model.parameters(), lr=0.5)
    with traindoctor.watch(select=["TD206"]) as b:
        train_epoch(model, opt2, vector_loader(64))
    assert codes(a) == [] and codes(b) == []


def _lbfgs_steps(model: nn.Module, opt: torch.optim.Optimizer, x, y, steps: int) -> None:
    """pytorch/examples time_sequence_prediction's shape: the whole data set as one batch,
    LBFGS re-evaluating the loss in a closure up to ``max_iter`` times per step."""
    for _ in range(steps):

        def closure():
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss

        opt.step(closure)


def test_td206_lbfgs_closure_evaluations_are_not_gradient_accumulation() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=20)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    with traindoctor.watch(select=["TD206"]) as doctor:
        _lbfgs_steps(model, opt, x, y, steps=6)
    assert codes(doctor) == []  # was: "effective batch is 1280" (64 x 20 closure calls)
    calls = [(r.backward_calls, r.closure_backward_calls) for r in doctor.records]
    assert all(inside == total > 1 for total, inside in calls)
    assert {r.accumulated_backward_calls for r in doctor.records} == {1}


def test_td206_real_accumulation_to_a_large_batch_still_fires() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    with traindoctor.watch(select=["TD206"]) as doctor:
        for _ in range(4):
            for _ in range(20):  # 20 micro-batches of 64 accumulated into each step
                nn.functional.mse_loss(model(torch.randn(64, 8)), torch.randn(64, 1)).backward()
            opt.step()
            opt.zero_grad()
    ev = finding(doctor, "TD206").evidence
    assert ev["effective_batch"] == 1280 and ev["accumulation"] == 20


def test_td206_lr_scaled_from_reference_without_warmup() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.8)
    with traindoctor.watch(select=["TD206"], thresholds={"reference_lr": 0.1}) as doctor:
        train_epoch(model, opt, vector_loader(64))
    assert finding(doctor, "TD206").evidence["lr_factor"] == 8.0
