"""``torch.distributed.checkpoint``'s state-dict helpers step a fresh optimizer once with lr 0
(``_init_optim_state``) to create its state before loading a sharded checkpoint into it. That
step is not training: ``traindoctor run`` must not count it (issue 9). The loop is shaped like a
real DCP resume: build model and optimizer, ``get_state_dict`` -> ``dcp.load`` ->
``set_state_dict``, then train."""

from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

import traindoctor

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def _model_and_optimizer():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def _train(model, opt, steps: int) -> None:
    g = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x, y = torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def _write_checkpoint(folder) -> None:
    model, opt = _model_and_optimizer()
    _train(model, opt, 3)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=folder, no_dist=True)


def _resume_and_train(folder, steps: int):
    model, opt = _model_and_optimizer()
    msd, osd = get_state_dict(model, opt)  # steps the fresh AdamW once with lr 0
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=folder, no_dist=True)
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    _train(model, opt, steps)
    return model, opt


def test_dcp_state_init_step_is_not_a_training_step(tmp_path) -> None:
    _write_checkpoint(tmp_path / "ck")
    with traindoctor.watch() as doctor:
        model, opt = _resume_and_train(tmp_path / "ck", steps=4)
    assert doctor.step == 4
    assert len(doctor.records) == 4 and doctor.profile.steps == 4
    assert all(r.backward_calls == 1 for r in doctor.records)
    assert opt.state[next(iter(model.parameters()))]["step"].item() == 3 + 4  # resumed state
    assert [n for n in doctor.notes if "internal error" in n] == []


def test_a_real_first_step_at_lr_zero_still_counts() -> None:
    """Warm-up from lr 0: the first real step has lr 0 and no state, but a backward() before it."""
    model, opt = _model_and_optimizer()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: s / 4)
    with traindoctor.watch() as doctor:
        g = torch.Generator().manual_seed(1)
        for _ in range(4):
            loss = nn.functional.mse_loss(model(torch.randn(8, 4, generator=g)), torch.zeros(8, 1))
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    assert doctor.step == 4 and len(doctor.records) == 4
