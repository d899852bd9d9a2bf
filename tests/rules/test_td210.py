"""TD210 conv-bias-before-batchnorm: static and runtime."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers.project_tree import checked_rows
from helpers.rule_loops import codes, finding
from helpers.run_cli import run_findings
from helpers.snippets import check_findings, check_rows
from torch import nn

import traindoctor

SEQUENTIAL = """
import torch.nn as nn

stem = nn.Sequential(nn.Conv2d(3, 8, 3, bias={bias}), nn.BatchNorm2d(8), nn.ReLU())
"""


# ------------------------------------------------------------------ traindoctor check
def test_td210_sequential_pair_and_its_fix() -> None:
    assert check_rows(SEQUENTIAL.format(bias=True), ["TD210"]) == [("TD210", 4)]
    (found,) = check_findings(SEQUENTIAL.format(bias=True), ["TD210"])
    assert "`Conv2d` has a bias" in found.message
    assert found.fix is not None and found.fix.applicability == "unsafe"
    assert check_rows(SEQUENTIAL.format(bias=False), ["TD210"]) == []
    assert check_rows(SEQUENTIAL.format(bias=True), ["TD210"], filename="tests/test_models.py") == []


def test_td210_dimensions_must_match() -> None:
    src = """
    import torch.nn as nn

    a = nn.Sequential(nn.Conv1d(3, 8, 3), nn.BatchNorm2d(8))
    b = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8))
    """
    assert check_rows(src, ["TD210"]) == [("TD210", 5)]


def test_td210_multi_file_project(tmp_path: Path) -> None:
    files = {
        "models.py": """
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.conv = nn.Conv2d(3, 8, 3)
                    self.bn = nn.BatchNorm2d(8)

                def forward(self, x):
                    h = self.conv(x)
                    h = self.bn(h)
                    return h.mean()
            """,
        "train.py": """
            import torch
            from models import Net

            model = Net()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            model(torch.randn(2, 3, 8, 8)).backward()
            opt.step()
            """,
    }
    assert checked_rows(tmp_path, files, "models.py", ["TD210"]) == [("TD210", 6)]
    assert checked_rows(tmp_path, files, "train.py", ["TD210"]) == []


# ------------------------------------------------------------------ watch()
def _train(model: nn.Module, steps: int = 2) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(step))
        nn.functional.cross_entropy(model(x), torch.tensor([0, 1, 0, 1])).backward()
        opt.step()
        opt.zero_grad()


def _net(bias: bool) -> nn.Module:
    torch.manual_seed(0)
    body = nn.Sequential(nn.Conv2d(3, 4, 3, bias=bias), nn.BatchNorm2d(4), nn.ReLU())
    return nn.Sequential(body, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2))


def test_td210_runtime_pair_in_the_module_graph() -> None:
    with traindoctor.watch(select=["TD210"]) as doctor:
        _train(_net(bias=True))
    ev = finding(doctor, "TD210").evidence
    assert ev == {"pairs": ["0.0 -> 0.1"], "layers": 1, "dead_bias_parameters": 4}


def test_td210_runtime_silent_without_bias_or_without_training() -> None:
    with traindoctor.watch(select=["TD210"]) as doctor:
        _train(_net(bias=False))
    assert codes(doctor) == []
    model = _net(bias=True).eval()
    with traindoctor.watch(select=["TD210"]) as doctor, torch.no_grad():
        model(torch.randn(2, 3, 8, 8))  # inference only
    assert codes(doctor) == []


# ------------------------------------------------------------------ traindoctor run
SCRIPT = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 4, 3, bias={bias}), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(144, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = nn.functional.cross_entropy(model(torch.randn(4, 3, 8, 8)), torch.tensor([0, 1, 0, 1]))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_td210_through_traindoctor_run(tmp_path: Path) -> None:
    (found,) = [f for f in run_findings(tmp_path, SCRIPT.format(bias=True), "TD210") if f["origin"] == "runtime"]
    assert found["code"] == "TD210" and found["evidence"]["pairs"] == ["0 -> 1"]
    # the line (and column) check reports: the Conv2d call inside the script's nn.Sequential
    assert found["location"]["row"] == 5 and found["location"]["column"] == 23
    healthy = run_findings(tmp_path, SCRIPT.format(bias=False), "TD210")
    assert [f for f in healthy if f["origin"] == "runtime"] == []


MODULE = """
import torch.nn as nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 4, 3),
            nn.BatchNorm2d(4),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(144, 2))

    def forward(self, x):
        return self.head(self.features(x))
"""

USES_MODULE = """
import torch
from torch import nn
from nets import Net

model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = nn.functional.cross_entropy(model(torch.randn(4, 3, 8, 8)), torch.tensor([0, 1, 0, 1]))
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_td210_run_places_a_user_class_layer_on_its_line_in_the_model_module(tmp_path: Path) -> None:
    (tmp_path / "nets.py").write_text(MODULE)
    (found,) = [f for f in run_findings(tmp_path, USES_MODULE, "TD210") if f["origin"] == "runtime"]
    assert found["evidence"]["pairs"] == ["features.0 -> features.1"]
    assert (found["filename"], found["location"]["row"]) == ("nets.py", 9)
