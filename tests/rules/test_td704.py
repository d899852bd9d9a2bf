"""TD704 train-mode-not-restored: static and runtime."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers.project_tree import checked_rows
from helpers.rule_loops import codes, conv_bn_net, finding, images
from helpers.run_cli import run_findings
from helpers.snippets import check_findings, check_rows
from torch import nn

import traindoctor

LOOP = """
import torch

for epoch in range(3):
    {restore}
    for x, y in loader:
        criterion(model(x), y).backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        print(model(x_val).argmax(1))
"""


# ------------------------------------------------------------------ traindoctor check
def test_td704_eval_in_the_epoch_loop_without_train() -> None:
    assert check_rows(LOOP.format(restore="pass"), ["TD704"]) == [("TD704", 9)]
    (found,) = check_findings(LOOP.format(restore="pass"), ["TD704"])
    assert "`model.train()`" in found.message
    assert check_rows(LOOP.format(restore="model.train()"), ["TD704"]) == []
    assert check_rows(LOOP.format(restore="model.train(True)"), ["TD704"]) == []


def test_td704_helper_that_restores_through_another_helper_is_silent() -> None:
    src = """
    import torch

    def set_train(m):
        m.train()

    def evaluate(m):
        m.eval()

    for x, y in loader:
        criterion(model(x), y).backward()
        opt.step()
        evaluate(model)
        set_train(model)
    """
    assert check_rows(src, ["TD704"]) == []
    assert check_rows(src.replace("        set_train(model)\n", ""), ["TD704"]) == [("TD704", 13)]


def test_td704_multi_file_project(tmp_path: Path) -> None:
    files = {
        "models.py": """
            from torch import nn

            def build():
                net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 2))
                net.eval()
                return net
            """,
        "train.py": """
            import torch
            from models import build

            model = build()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                for x, y in loader:
                    torch.nn.functional.cross_entropy(model(x), y).backward()
                    opt.step()
                model.eval()
            """,
    }
    assert checked_rows(tmp_path, files, "train.py", ["TD704"]) == [("TD704", 10)]
    assert checked_rows(tmp_path, files, "models.py", ["TD704"]) == []  # no training loop there


# ------------------------------------------------------------------ watch()
def _epochs(model: nn.Module, restore: bool, epochs: int = 3) -> torch.Tensor:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _epoch in range(epochs):
        if restore:
            model.train()
        for step in range(3):
            x, y = images(8, seed=step)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
        model.eval()
        with torch.no_grad():
            model(images(4, seed=9)[0])
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def test_td704_runtime_steps_in_eval_mode() -> None:
    with traindoctor.watch(select=["TD704"]) as doctor:
        _epochs(conv_bn_net(), restore=False)
    ev = finding(doctor, "TD704").evidence
    assert ev == {"eval_mode_steps": 6, "first_step": 4, "layers": {"BatchNorm2d": 1, "Dropout": 1}}


def test_td704_runtime_healthy_twin_and_frozen_batchnorm() -> None:
    with traindoctor.watch(select=["TD704"]) as doctor:
        _epochs(conv_bn_net(), restore=True)
    assert codes(doctor) == []
    model = conv_bn_net()
    model[1].eval()  # BatchNorm frozen on purpose before training: never trained in train mode
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD704"]) as doctor:
        for step in range(4):
            x, y = images(8, seed=step)
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    assert codes(doctor) == []


def test_td704_runtime_leaves_training_bit_identical() -> None:
    plain = _epochs(conv_bn_net(), restore=False)
    with traindoctor.watch(select=["TD704"]):
        watched = _epochs(conv_bn_net(), restore=False)
    assert torch.equal(plain, watched)


# ------------------------------------------------------------------ traindoctor run
SCRIPT = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(3):
    {restore}
    for step in range(3):
        loss = nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.zeros(8, dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        model(torch.randn(2, 4))
"""


def test_td704_through_traindoctor_run(tmp_path: Path) -> None:
    found = [f for f in run_findings(tmp_path, SCRIPT.format(restore="pass"), "TD704") if f["origin"] == "runtime"]
    assert [(f["code"], f["evidence"]["eval_mode_steps"]) for f in found] == [("TD704", 6)]
    assert run_findings(tmp_path, SCRIPT.format(restore="model.train()"), "TD704") == []
