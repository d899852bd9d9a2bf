"""TD209 double-activation-before-loss: static and runtime."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers.project_tree import checked_rows
from helpers.rule_loops import codes, finding, line_of
from helpers.run_cli import run_findings
from helpers.snippets import check_findings, check_rows
from torch import nn

import traindoctor


# ------------------------------------------------------------------ traindoctor check
def test_td209_sigmoid_into_bce_with_logits() -> None:
    src = """
    import torch
    import torch.nn.functional as F

    def train_step(model, x, y):
        p = model(x).sigmoid()
        loss = F.binary_cross_entropy_with_logits(p, y)
        loss2 = F.binary_cross_entropy_with_logits(model(x), y)
        return loss + loss2
    """
    assert check_rows(src, ["TD209"]) == [("TD209", 7)]
    (found,) = check_findings(src, ["TD209"])
    assert "`BCEWithLogitsLoss` gets a sigmoid output" in found.message


def test_td209_skips_test_files_and_unrelated_losses() -> None:
    src = """
    import torch
    probs = torch.softmax(logits, dim=1)
    loss = torch.nn.functional.cross_entropy(probs, y)
    nll = torch.nn.functional.nll_loss(probs.log(), y)
    """
    assert check_rows(src, ["TD209"]) == [("TD209", 4)]
    assert check_rows(src, ["TD209"], filename="tests/test_losses.py") == []


def test_td209_multi_file_project(tmp_path: Path) -> None:
    files = {
        "losses.py": """
            import torch.nn as nn

            criterion = nn.BCEWithLogitsLoss()
            """,
        "train.py": """
            import torch
            from losses import criterion

            def step(model, x, y):
                probs = torch.sigmoid(model(x))
                return torch.nn.functional.binary_cross_entropy_with_logits(probs, y)
            """,
    }
    assert checked_rows(tmp_path, files, "train.py", ["TD209"]) == [("TD209", 6)]
    assert checked_rows(tmp_path, files, "losses.py", ["TD209"]) == []


# ------------------------------------------------------------------ watch()
def _train(activate: bool, loss_fn: nn.Module, targets: torch.Tensor, steps: int = 4) -> None:
    torch.manual_seed(0)
    model = nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        out = model(torch.randn(4, 8))
        if activate:
            out = torch.sigmoid(out) if isinstance(loss_fn, nn.BCEWithLogitsLoss) else out.softmax(dim=1)
        loss_fn(out, targets).backward()  # the loss line
        opt.step()
        opt.zero_grad()


def test_td209_runtime_softmax_into_cross_entropy() -> None:
    with traindoctor.watch(select=["TD209"]) as doctor:
        _train(True, nn.CrossEntropyLoss(), torch.tensor([0, 1, 2, 0]))
    found = finding(doctor, "TD209")
    assert found.evidence == {
        "loss": "cross_entropy",
        "activation": "softmax",
        "calls": 4,
        "sampled": 4,
        "activated": 4,
    }
    assert found.location.row == line_of("# the loss line")


def test_td209_runtime_sigmoid_into_bce_and_healthy_twins() -> None:
    bce_targets = torch.zeros(4, 3)
    with traindoctor.watch(select=["TD209"]) as doctor:
        _train(True, nn.BCEWithLogitsLoss(), bce_targets)
    assert finding(doctor, "TD209").evidence["activation"] == "sigmoid"
    with traindoctor.watch(select=["TD209"]) as doctor:
        _train(False, nn.BCEWithLogitsLoss(), bce_targets)
        _train(False, nn.CrossEntropyLoss(), torch.tensor([0, 1, 2, 0]))
    assert codes(doctor) == []


def test_td209_runtime_ignores_evaluation_and_leaves_the_loss_unchanged() -> None:
    torch.manual_seed(0)
    logits = torch.randn(4, 3)
    want = nn.functional.cross_entropy(logits.softmax(1), torch.tensor([0, 1, 2, 0]))
    with traindoctor.watch(select=["TD209"]) as doctor, torch.no_grad():
        got = nn.functional.cross_entropy(logits.softmax(1), torch.tensor([0, 1, 2, 0]))
    assert torch.equal(want, got) and codes(doctor) == []


# ------------------------------------------------------------------ traindoctor run
SCRIPT = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 1){act})
opt = torch.optim.SGD(model.parameters(), lr=0.1)
criterion = nn.BCEWithLogitsLoss()
for step in range(4):
    loss = criterion(model(torch.randn(4, 8)), torch.ones(4, 1))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_td209_through_traindoctor_run(tmp_path: Path) -> None:
    found = run_findings(tmp_path, SCRIPT.format(act=", nn.Sigmoid()"), "TD209")
    assert [(f["origin"], f["location"]["row"]) for f in found] == [("runtime", 9)]
    assert check_rows(SCRIPT.format(act=", nn.Sigmoid()"), ["TD209"]) == [("TD209", 10)]  # the same line
    assert run_findings(tmp_path, SCRIPT.format(act=""), "TD209") == []
    assert check_rows(SCRIPT.format(act=""), ["TD209"]) == []


def test_td209_losses_probe_patches_only_while_listened_to() -> None:
    original = nn.functional.cross_entropy
    with traindoctor.watch(select=["TD101"]):
        assert nn.functional.cross_entropy is original  # no monitor reads loss inputs
    with traindoctor.watch(select=["TD209"]):
        assert nn.functional.cross_entropy is not original
    assert nn.functional.cross_entropy is original
