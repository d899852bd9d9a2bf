"""TD504 checkpoint-without-rng: static and runtime.

The missing streams and the data position; helpers that restore rather than save.
"""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

import numpy as np
import torch
from helpers.rule_loops import codes, finding, images, model_and_momentum_sgd, train_steps
from helpers.snippets import checkpoint_run, found
from torch import nn

import traindoctor
from traindoctor.check.engine import check_source
from traindoctor.config import Settings
from traindoctor.registry import get_rule


# ------------------------------------------------------------------ traindoctor check
def test_mid_epoch_checkpoint_needs_data_position_and_all_rngs():
    src = """
    import random
    import numpy as np
    import torch

    model = Net().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        for x, y in loader:
            x = augment(x, np.random.rand())
            if random.random() < 0.5:
                x = x.flip(-1)
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
            if want_checkpoint():
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "rng": torch.get_rng_state(), "epoch": epoch}, "ckpt.pt")
    """
    result = checkpoint_run(src)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD504", 16)]
    msg = result.findings[0].message
    assert msg.startswith(
        "This checkpoint misses the CUDA generators, NumPy's global generator, "
        "Python's `random` generator, the data position within the epoch"
    )
    assert "`np.random.get_state()`" in msg and "`random.getstate()`" in msg


RESTORE = """
import os
import torch
import utils

def main(args):
    model = build().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    to_restore = {"epoch": 0}
    utils.{helper}(os.path.join(args.out, "checkpoint.pth"), run_variables=to_restore, model=model, optimizer=optimizer)
    for epoch in range(to_restore["epoch"], args.epochs):
        for x, y in loader:
            loss = model(x.cuda()).sum()
            loss.backward()
            optimizer.step()
        save_dict = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1}
        utils.save_on_master(save_dict, os.path.join(args.out, "checkpoint.pth"))
"""


def test_a_helper_that_restores_from_a_checkpoint_saves_no_rng() -> None:
    for helper in ("restart_from_checkpoint", "load_checkpoint", "resume_from_ckpt", "restore_checkpoint"):
        assert found(RESTORE.replace("{helper}", helper), ["TD504"]) == [("TD504", 16)], helper


def test_an_unknown_helper_that_saves_may_still_hold_rng() -> None:
    for helper in ("save_checkpoint", "checkpoint", "save_or_resume_checkpoint"):
        assert found(RESTORE.replace("{helper}", helper), ["TD504"]) == [], helper


def test_td504_asks_for_the_data_position_only_with_a_loader() -> None:
    rule = get_rule("TD504")
    get_batch_loop = textwrap.dedent(
        """
        import torch

        optimizer = torch.optim.AdamW(model.parameters())
        while True:
            X, Y = get_batch("train")
            model(X, Y).backward()
            optimizer.step()
            if should_checkpoint():
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "rng": torch.get_rng_state()}, "ckpt.pt")
        """
    )
    assert check_source(get_batch_loop, "t.py", Settings(), [rule()]).findings == []
    loader_loop = get_batch_loop.replace('while True:\n    X, Y = get_batch("train")', "for X, Y in loader:")
    (finding,) = check_source(loader_loop, "t.py", Settings(), [rule()]).findings
    assert "data position" in finding.message


# ------------------------------------------------------------------ traindoctor run
def _rng() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def _draw_everywhere(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    """Training that draws from torch (dropout), NumPy and Python's random."""
    for step in range(2):
        np.random.rand()
        random.random()
        train_steps(model, opt, steps=1)


def test_td504_only_torch_rng_saved(tmp_path: Path) -> None:
    model, opt = model_and_momentum_sgd()
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
    model, opt = model_and_momentum_sgd()
    with traindoctor.watch(select=["TD504"]) as doctor:
        _draw_everywhere(model, opt)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "rng": _rng()}, tmp_path / "a.pt")
    assert codes(doctor) == []


def test_td504_mid_epoch_needs_the_data_position(tmp_path: Path) -> None:
    model, opt = model_and_momentum_sgd()
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


def test_td504_no_data_position_for_a_sampler_drawing_with_replacement(tmp_path: Path) -> None:
    """makemore's shape: an "infinite" loader (RandomSampler with replacement, 1e10 samples)
    read through a stored iterator, the model saved periodically. Each batch is a fresh random
    draw, so only the RNG state is missing, not a data position."""
    model, opt = model_and_momentum_sgd()
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


BEST_BESIDE_PERIODIC = """
import torch

def main(model, optimizer, loader, evaluate):
    max_accuracy = 0.0
    for epoch in range(100):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(torch.nn.functional.dropout(x)), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "checkpoint.pth")
        acc = evaluate(model)
        if acc >= max_accuracy:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "best_model.pth")
        max_accuracy = max(acc, max_accuracy)
"""


def test_a_best_so_far_save_beside_the_periodic_checkpoint_is_not_reported_twice():
    # the same missing RNG state, said once, at the checkpoint the run resumes from (xcit)
    assert found(BEST_BESIDE_PERIODIC, ["TD504"]) == [("TD504", 11)]
    only_best = BEST_BESIDE_PERIODIC.replace(
        '        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "checkpoint.pth")\n',
        "",
    )
    assert found(only_best, ["TD504"]) == [("TD504", 13)]  # the only one there is: it carries it
