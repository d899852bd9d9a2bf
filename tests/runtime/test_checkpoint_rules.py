"""Runtime halves of TD501-TD504: ``torch.save`` intercepted on tiny real CPU loops."""

from __future__ import annotations

import io
import random
from pathlib import Path

import numpy as np
import torch
from rule_loops import codes, conv_bn_net, finding, images, line_of, train_steps
from torch import nn

import traindoctor


def _setup() -> tuple[nn.Module, torch.optim.Optimizer]:
    model = conv_bn_net()
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _rng() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


# ---------------------------------------------------------------- TD501
def test_td501_weights_only_checkpoint(tmp_path: Path) -> None:
    model, opt = _setup()
    loss_fn = nn.CrossEntropyLoss()
    with traindoctor.watch(select=["TD501"]) as doctor:
        for step in range(2):
            x, y = images(8, seed=step)
            loss_fn(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            torch.save(model.state_dict(), tmp_path / "last.pt")  # weights-only save
    f = finding(doctor, "TD501")
    assert f.filename == __file__ and f.location.row == line_of("# weights-only save")
    assert f.evidence == {"path": str(tmp_path / "last.pt"), "missing_optimizers": ["SGD"], "optimizer_states_saved": 0}
    assert f.step == 1


def test_td501_weights_export_after_training_is_not_a_checkpoint(tmp_path: Path) -> None:
    """The shared definition (traindoctor.facts.checkpoint.kinds): weights saved after the training
    loop, never read back, are an export; the checker is silent on the same code."""
    model, opt = _setup()
    with traindoctor.watch(select=["TD501", "TD504"]) as doctor:
        train_steps(model, opt, steps=2)
        torch.save(model.state_dict(), tmp_path / "model_final.pt")
    assert codes(doctor) == []


def test_td501_silent_with_optimizer_state_or_in_memory_copy(tmp_path: Path) -> None:
    model, opt = _setup()
    with traindoctor.watch(select=["TD501"]) as doctor:
        train_steps(model, opt, steps=2)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "ck.pt")
        torch.save(model.state_dict(), io.BytesIO())  # a deep copy through a buffer
        torch.save({"embedding": torch.randn(3, 3)}, tmp_path / "other.pt")  # not the model
    assert codes(doctor) == []


def test_td501_matches_copied_weights_by_keys(tmp_path: Path) -> None:
    model, opt = _setup()
    with traindoctor.watch(select=["TD501"]) as doctor:
        train_steps(model, opt, steps=1)
        cpu_copy = {k: v.clone() for k, v in model.state_dict().items()}
        torch.save({"state_dict": cpu_copy, "epoch": 1}, tmp_path / "ck.pt")
    assert codes(doctor) == ["TD501"]


def test_save_writes_the_same_bytes_when_watched(tmp_path: Path) -> None:
    model, opt = _setup()
    train_steps(model, opt, steps=1)
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    (tmp_path / "plain").mkdir()
    (tmp_path / "watched").mkdir()
    torch.save(state, tmp_path / "plain" / "ck.pt")  # the archive embeds the file's stem
    with traindoctor.watch():
        torch.save(state, tmp_path / "watched" / "ck.pt")
    assert (tmp_path / "plain" / "ck.pt").read_bytes() == (tmp_path / "watched" / "ck.pt").read_bytes()
    assert torch.save.__module__ == "torch.serialization"  # restored


# ---------------------------------------------------------------- TD502
def test_td502_scheduler_missing(tmp_path: Path) -> None:
    model, opt = _setup()
    with traindoctor.watch(select=["TD502"]) as doctor:
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1)
        train_steps(model, opt, steps=2)
        sched.step()
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "a.pt")
    f = finding(doctor, "TD502")
    assert f.evidence["missing_schedulers"] == ["StepLR"]


def test_td502_silent_with_scheduler_state_or_weights_export(tmp_path: Path) -> None:
    model, opt = _setup()
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


# ---------------------------------------------------------------- TD503
def test_td503_scaler_missing_and_present(tmp_path: Path) -> None:
    model, opt = _setup()
    with traindoctor.watch(select=["TD503"]) as doctor:
        scaler = torch.amp.GradScaler("cpu")
        for step in range(2):
            x, y = images(8, seed=step)
            scaler.scale(nn.functional.cross_entropy(model(x), y)).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
        base = {"model": model.state_dict(), "optimizer": opt.state_dict()}
        torch.save(base, tmp_path / "a.pt")  # no scaler
        torch.save({**base, "scaler": scaler.state_dict()}, tmp_path / "b.pt")
    f = finding(doctor, "TD503")
    assert f.location.row == line_of("# no scaler")
    assert f.evidence == {"path": str(tmp_path / "a.pt"), "loss_scale_now": 65536.0}


# ---------------------------------------------------------------- TD504
def _draw_everywhere(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    """Training that draws from torch (dropout), NumPy and Python's random."""
    for step in range(2):
        np.random.rand()
        random.random()
        train_steps(model, opt, steps=1)


def test_td504_only_torch_rng_saved(tmp_path: Path) -> None:
    model, opt = _setup()
    with traindoctor.watch(select=["TD504"]) as doctor:
        _draw_everywhere(model, opt)
        torch.save(
            {"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": torch.get_rng_state()},
            tmp_path / "a.pt",
        )
    f = finding(doctor, "TD504")
    assert f.evidence["missing_rng"] == ["numpy", "python"]
    assert f.evidence["rng_saved"] == ["torch"]
    assert f.evidence["mid_epoch"] is None


def test_td504_silent_with_every_used_stream(tmp_path: Path) -> None:
    model, opt = _setup()
    with traindoctor.watch(select=["TD504"]) as doctor:
        _draw_everywhere(model, opt)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": _rng()}, tmp_path / "a.pt")
    assert codes(doctor) == []


def test_td504_mid_epoch_needs_the_data_position(tmp_path: Path) -> None:
    model, opt = _setup()
    data = torch.utils.data.TensorDataset(*images(32))
    with traindoctor.watch(select=["TD504"]) as doctor:
        loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
        for i, (x, y) in enumerate(loader):
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            if i == 2:
                state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": _rng()}
                torch.save({**state, "epoch": 0}, tmp_path / "a.pt")
                torch.save({**state, "epoch": 0, "step": i + 1}, tmp_path / "b.pt")  # has position
    f = finding(doctor, "TD504")
    assert f.evidence["path"] == str(tmp_path / "a.pt")
    assert f.evidence["mid_epoch"] == [3, 8] and f.evidence["missing_rng"] == []


def test_traindoctor_checkpoint_save_satisfies_every_checkpoint_rule(tmp_path: Path) -> None:
    from traindoctor.checkpoint import save

    model, opt = _setup()
    data = torch.utils.data.TensorDataset(*images(32))
    with traindoctor.watch(select=["TD501", "TD502", "TD503", "TD504"]) as doctor:
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
        scaler = torch.amp.GradScaler("cpu")
        loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
        for i, (x, y) in enumerate(loader):
            np.random.rand()
            random.random()
            scaler.scale(nn.functional.cross_entropy(model(x), y)).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            sched.step()
            if i == 2:  # mid-epoch
                save(
                    tmp_path / "last.pt",
                    model=model,
                    optimizer=opt,
                    scheduler=sched,
                    scaler=scaler,
                    step=i + 1,
                    epoch=0,
                )
            if i == 3:  # the same helper without the scheduler: the audit does see the checkpoint
                save(tmp_path / "nosched.pt", model=model, optimizer=opt, scaler=scaler, step=4)  # !
    assert (tmp_path / "last.pt").exists()
    assert codes(doctor) == ["TD502"], [(f.code, f.evidence) for f in doctor.findings]
    f = finding(doctor, "TD502")
    assert f.location.row == line_of("step=4)  # !") and f.evidence["path"] == str(tmp_path / "nosched.pt")


def test_td504_no_data_position_for_a_sampler_drawing_with_replacement(tmp_path: Path) -> None:
    """makemore's shape: an "infinite" loader (RandomSampler with replacement, 1e10 samples)
    read through a stored iterator, the model saved periodically. Each batch is a fresh random
    draw, so only the RNG state is missing, not a data position."""
    model, opt = _setup()
    data = torch.utils.data.TensorDataset(*images(32))
    sampler = torch.utils.data.RandomSampler(data, replacement=True, num_samples=int(1e10))
    with traindoctor.watch(select=["TD504"]) as doctor:
        loader = torch.utils.data.DataLoader(data, batch_size=4, sampler=sampler)
        batches = iter(loader)  # kept beside its loader, as makemore's InfiniteDataLoader does
        for step in range(1, 7):
            x, y = next(batches)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            if step % 3 == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "model.pt")
    f = finding(doctor, "TD504")
    assert f.evidence["mid_epoch"] is None and f.evidence["missing_rng"] == ["torch"]
    assert "data position" not in f.message
