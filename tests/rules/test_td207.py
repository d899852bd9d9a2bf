"""TD207 accumulation-loss-not-divided: static and runtime."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers.project_tree import checked_rows
from helpers.rule_loops import codes, finding, mlp, vectors
from helpers.run_cli import run_findings
from helpers.snippets import check_findings, check_rows
from torch import nn

import traindoctor

LOOP = """
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y){divide}
    loss.backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
"""


# ------------------------------------------------------------------ traindoctor check
def test_td207_undivided_loss_under_an_accumulation_step() -> None:
    assert check_rows(LOOP.format(divide=""), ["TD207"]) == [("TD207", 4)]
    (found,) = check_findings(LOOP.format(divide=""), ["TD207"])
    assert "divide the loss by `accum`" in found.message
    assert check_rows(LOOP.format(divide=" / accum"), ["TD207"]) == []


def test_td207_count_handed_to_a_helper_or_no_accumulation_is_silent() -> None:
    helper = LOOP.format(divide="").replace("criterion(model(x), y)", "compute_loss(model, x, y, accum)")
    assert check_rows(helper, ["TD207"]) == []
    plain = """
    for x, y in loader:
        criterion(model(x), y).backward()
        optimizer.step()
        if step % log_every == 0:
            print(step)
    """
    assert check_rows(plain, ["TD207"]) == []


def test_td207_multi_file_project(tmp_path: Path) -> None:
    files = {
        "config.py": """
            ACCUM = 8
            """,
        "train.py": """
            from config import ACCUM

            for step, (x, y) in enumerate(loader):
                loss = criterion(model(x), y)
                loss.backward()
                if step % ACCUM == 0:
                    optimizer.step()
                    optimizer.zero_grad()
            """,
    }
    assert checked_rows(tmp_path, files, "train.py", ["TD207"]) == [("TD207", 5)]
    assert checked_rows(tmp_path, files, "config.py", ["TD207"]) == []


# ------------------------------------------------------------------ watch()
def _train(divide: bool, accumulation: int = 4, steps: int = 3, scaler: bool = False) -> torch.Tensor:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    grad_scaler = torch.amp.GradScaler("cpu") if scaler else None
    for i in range(steps * accumulation):
        x, y = vectors(8, seed=i)
        loss = nn.functional.cross_entropy(model(x), y)
        if divide:
            loss = loss / accumulation
        (grad_scaler.scale(loss) if grad_scaler else loss).backward()
        if (i + 1) % accumulation == 0:
            if grad_scaler:
                grad_scaler.step(opt)
                grad_scaler.update()
            else:
                opt.step()
            opt.zero_grad()
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_td207_runtime_undivided_accumulated_losses() -> None:
    with traindoctor.watch(select=["TD207"]) as doctor:
        _train(divide=False)
    ev = finding(doctor, "TD207").evidence
    assert ev == {"backward_per_step": 4, "sampled_steps": 3, "undivided_steps": 3, "loss_root": "NllLossBackward0"}


def test_td207_runtime_with_a_grad_scaler() -> None:
    with traindoctor.watch(select=["TD207"]) as doctor:
        _train(divide=False, scaler=True)
    assert finding(doctor, "TD207").evidence["undivided_steps"] == 3
    with traindoctor.watch(select=["TD207"]) as doctor:
        _train(divide=True, scaler=True)
    assert codes(doctor) == []


def test_td207_runtime_healthy_twins() -> None:
    with traindoctor.watch(select=["TD207"]) as doctor:
        _train(divide=True)
        _train(divide=False, accumulation=1)  # no accumulation: nothing to divide
    assert codes(doctor) == []


def test_td207_runtime_leaves_training_bit_identical() -> None:
    plain = _train(divide=False)
    original = torch.Tensor.backward
    with traindoctor.watch(select=["TD207"]):
        watched = _train(divide=False)
        assert torch.Tensor.backward is not original
    assert torch.Tensor.backward is original
    assert torch.equal(plain, watched)


# ------------------------------------------------------------------ traindoctor run
SCRIPT = """
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
accum = 3
for i in range(9):
    loss = model(torch.randn(8, 4)).pow(2).mean(){divide}
    loss.backward()
    if (i + 1) % accum == 0:
        opt.step()
        opt.zero_grad()
"""


def test_td207_through_traindoctor_run(tmp_path: Path) -> None:
    found = run_findings(tmp_path, SCRIPT.format(divide=""), "TD207")
    assert [(f["code"], f["evidence"]["backward_per_step"]) for f in found] == [("TD207", 3)]
    assert run_findings(tmp_path, SCRIPT.format(divide=" / accum"), "TD207") == []
