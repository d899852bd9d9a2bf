"""TD404 detect-anomaly-on: static and runtime."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.project_tree import checked_rows
from helpers.rule_loops import codes, finding, mlp, train_steps, vectors
from helpers.run_cli import run_findings
from helpers.snippets import check_findings, check_rows

import traindoctor

pytestmark = pytest.mark.filterwarnings("ignore:Anomaly Detection has been enabled")


# ------------------------------------------------------------------ traindoctor check
def test_td404_unconditional_call_in_a_training_file() -> None:
    src = """
    import torch

    torch.autograd.set_detect_anomaly(mode=True, check_nan=True)
    if __name__ == "__main__":
        torch.autograd.set_detect_anomaly(True)
    loss.backward()
    """
    assert check_rows(src, ["TD404"]) == [("TD404", 4), ("TD404", 6)]
    assert "several times slower" in check_findings(src, ["TD404"])[0].message
    assert check_rows(src, ["TD404"], filename="tests/test_grad.py") == []


def test_td404_flag_and_debug_function_are_silent() -> None:
    src = """
    import torch

    torch.autograd.set_detect_anomaly(cfg.debug)
    def check_grads():
        torch.autograd.set_detect_anomaly(True)
    loss.backward()
    """
    assert check_rows(src, ["TD404"]) == []


def test_td404_multi_file_project(tmp_path: Path) -> None:
    files = {
        "setup_env.py": """
            import torch

            def configure():
                torch.autograd.set_detect_anomaly(True)
            """,
        "train.py": """
            import torch
            from setup_env import configure

            configure()
            torch.autograd.set_detect_anomaly(True)
            loss = model(x).sum()
            loss.backward()
            """,
    }
    # setup_env.py runs no backward: the rule judges the training script only
    assert checked_rows(tmp_path, files, "setup_env.py", ["TD404"]) == []
    assert checked_rows(tmp_path, files, "train.py", ["TD404"]) == [("TD404", 5)]


# ------------------------------------------------------------------ watch()
def test_td404_runtime_anomaly_mode_on_at_steady_steps() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD404"]) as doctor, torch.autograd.detect_anomaly():
        train_steps(model, opt, steps=6, data=vectors)
    ev = finding(doctor, "TD404").evidence
    assert ev["anomaly_mode"] is True and ev["sampled_steps"] == 4 and ev["median_step_ms"] > 0


def test_td404_runtime_silent_when_off_or_only_briefly_on() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD404"]) as doctor:
        with torch.autograd.detect_anomaly():
            train_steps(model, opt, steps=2, data=vectors)  # debugging the first steps only
        train_steps(model, opt, steps=6, data=vectors)
    assert codes(doctor) == []
    assert not torch.is_anomaly_enabled()


# ------------------------------------------------------------------ traindoctor run
SCRIPT = """
import torch

torch.autograd.set_detect_anomaly({on})
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(6):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_td404_through_traindoctor_run(tmp_path: Path) -> None:
    found = run_findings(tmp_path, SCRIPT.format(on=True), "TD404")
    assert [(f["code"], f["evidence"]["anomaly_mode"]) for f in found] == [("TD404", True)]
    assert run_findings(tmp_path, SCRIPT.format(on=False), "TD404") == []
