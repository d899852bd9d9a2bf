"""TD502 checkpoint-without-scheduler: runtime."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers.rule_loops import codes, finding, model_and_momentum_sgd, train_steps

import traindoctor


def test_td502_scheduler_missing(tmp_path: Path) -> None:
    model, opt = model_and_momentum_sgd()
    with traindoctor.watch(select=["TD502"]) as doctor:
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
        train_steps(model, opt, steps=2)
        sched.step()
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "a.pt")
    f = finding(doctor, "TD502")
    assert f.evidence["missing_schedulers"] == ["StepLR"]


def test_td502_silent_with_scheduler_state_or_weights_export(tmp_path: Path) -> None:
    model, opt = model_and_momentum_sgd()
    with traindoctor.watch(select=["TD502"]) as doctor:
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
        train_steps(model, opt, steps=2)
        sched.step()
        torch.save(
            {"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict()},
            tmp_path / "a.pt",
        )
        torch.save(model.state_dict(), tmp_path / "weights.pt")  # an export: TD501's business
    assert codes(doctor) == []
