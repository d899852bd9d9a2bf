"""TD208 zero-grad-missing: static and runtime."""

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
import torch

opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    {clear}
    criterion(model(x), y).backward()
    opt.step()
"""


# ------------------------------------------------------------------ traindoctor check
def test_td208_step_without_any_clear() -> None:
    assert check_rows(LOOP.format(clear="pass"), ["TD208"]) == [("TD208", 8)]
    (found,) = check_findings(LOOP.format(clear="pass"), ["TD208"])
    assert "`opt.zero_grad()`" in found.message
    for clear in ("opt.zero_grad()", "model.zero_grad(set_to_none=True)", "model.weight.grad = None"):
        assert check_rows(LOOP.format(clear=clear), ["TD208"]) == [], clear


def test_td208_needs_a_torch_optimizer_and_a_training_loop() -> None:
    src = """
    import torch

    opt = make_optimizer(model)  # unknown: it may clear gradients itself
    sched = torch.optim.lr_scheduler.StepLR(torch.optim.SGD(params, lr=0.1), 10)
    for x, y in loader:
        criterion(model(x), y).backward()
        opt.step()
        sched.step()
    sgd = torch.optim.SGD(params, lr=0.1)
    sgd.step()  # not in a loop that runs backward
    """
    assert check_rows(src, ["TD208"]) == []


def test_td208_multi_file_project(tmp_path: Path) -> None:
    files = {
        "utils.py": """
            def clear(opt):
                opt.zero_grad()
            """,
        "train.py": """
            import torch
            from utils import clear

            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                criterion(model(x), y).backward()
                opt.step()
            """,
    }
    # train.py imports a helper but never calls it: nothing clears the gradients of its loop
    assert checked_rows(tmp_path, files, "train.py", ["TD208"]) == [("TD208", 7)]
    assert checked_rows(tmp_path, files, "utils.py", ["TD208"]) == []


# ------------------------------------------------------------------ watch()
def _train(clear: str, steps: int = 6) -> torch.Tensor:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(steps):
        if clear == "before":
            opt.zero_grad()
        for micro in range(2 if clear == "accumulate" else 1):
            x, y = vectors(8, seed=step * 2 + micro)
            nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if clear in ("after", "accumulate"):
            opt.zero_grad(set_to_none=False)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_td208_runtime_gradients_carried_across_steps() -> None:
    with traindoctor.watch(select=["TD208"]) as doctor:
        _train("never")
    ev = finding(doctor, "TD208").evidence
    assert ev == {"sampled_steps": 4, "carried_steps": 4, "backward_per_step": 1}


def test_td208_runtime_healthy_twins() -> None:
    for clear in ("before", "after", "accumulate"):
        with traindoctor.watch(select=["TD208"]) as doctor:
            _train(clear)
        assert codes(doctor) == [], clear


def test_td208_runtime_gan_with_two_optimizers_is_healthy() -> None:
    torch.manual_seed(0)
    gen, disc = nn.Linear(4, 4), nn.Linear(4, 1)
    opt_g = torch.optim.Adam(gen.parameters(), lr=1e-3)
    opt_d = torch.optim.Adam(disc.parameters(), lr=1e-3)
    with traindoctor.watch(select=["TD208"]) as doctor:
        for _step in range(6):
            real, noise = torch.randn(8, 4), torch.randn(8, 4)
            opt_d.zero_grad()
            (disc(gen(noise).detach()).mean() - disc(real).mean()).backward()
            opt_d.step()
            opt_g.zero_grad()
            (-disc(gen(noise)).mean()).backward()  # also adds to disc's gradients
            opt_g.step()
    assert codes(doctor) == []


def test_td208_runtime_leaves_training_bit_identical() -> None:
    plain = _train("never")
    with traindoctor.watch(select=["TD208"]):
        watched = _train("never")
    assert torch.equal(plain, watched)


# ------------------------------------------------------------------ traindoctor run
SCRIPT = """
import torch

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(6):
    {clear}
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    opt.step()
"""


def test_td208_through_traindoctor_run(tmp_path: Path) -> None:
    found = run_findings(tmp_path, SCRIPT.format(clear="pass"), "TD208")
    assert [(f["code"], f["evidence"]["carried_steps"]) for f in found] == [("TD208", 4)]
    assert run_findings(tmp_path, SCRIPT.format(clear="opt.zero_grad()"), "TD208") == []
