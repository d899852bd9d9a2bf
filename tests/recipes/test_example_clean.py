"""The bundled example, built only from recipes, is clean under `check` and under `watch()`."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from traindoctor.check.engine import check_source
from traindoctor.config import Settings

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "recipes_train.py"
FAST = ["--epochs", "2", "--samples", "256", "--warmup-steps", "4"]


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("recipes_train_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # so worker processes can find its Dataset class
    spec.loader.exec_module(module)
    return module


def test_static_check_reports_nothing() -> None:
    result = check_source(EXAMPLE.read_bytes(), str(EXAMPLE), Settings(select=["TD"]))
    assert result.internal_errors == []
    assert [f"{f.code} {f.location}: {f.message}" for f in result.findings] == []


def test_the_same_script_written_by_hand_is_reported() -> None:
    # Control: undo three recipes by hand and the checker must notice, so the clean result above
    # means "nothing wrong", not "nothing checked".
    source = EXAMPLE.read_text(encoding="utf-8")
    replacements = {
        "param_groups(model, args.weight_decay), lr=lr": "model.parameters(), lr=lr",
        "**loader_kwargs(train_set, device=device)\n": "num_workers=4\n",
        "                amp.scaler.unscale_(optimizer)\n": "",
    }
    for old, new in replacements.items():
        assert old in source
        source = source.replace(old, new)
    result = check_source(source, str(EXAMPLE), Settings(select=["TD"]))
    assert {"TD103", "TD204", "TD302"} <= {f.code for f in result.findings}


def test_example_uses_only_recipes_for_what_traindoctor_checks() -> None:
    source = EXAMPLE.read_text(encoding="utf-8")
    for name in (
        "loader_kwargs(",
        "param_groups(",
        "scale_lr(",
        "effective_batch(",
        "warmup_schedule(",
        "autocast_settings(",
        "seed_everything(",
    ):
        assert name in source
    for hand_written in ("num_workers=", "pin_memory=", "weight_decay=", "GradScaler(", "torch.autocast("):
        assert hand_written not in source


def test_watched_run_reports_nothing_and_trains(tmp_path: Path) -> None:
    try:
        from traindoctor.doctor.watch import watch
    except ImportError as exc:  # the runtime doctor is optional while it is being built
        pytest.skip(f"traindoctor.doctor.watch.watch is not importable yet: {exc}")
    example = load_example()
    with watch() as doctor:
        result = example.main(FAST + ["--out", str(tmp_path)])
    assert [f"{f.code}: {f.message}" for f in doctor.findings] == []
    assert result["loss"] < 1.3  # it learned something (chance level is ln 4 = 1.39)


def test_checkpoint_holds_the_full_state_and_resumes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = load_example()
    example.main(["--epochs", "1", "--samples", "128", "--warmup-steps", "4", "--out", str(tmp_path)])
    state = torch.load(tmp_path / "last.pt", weights_only=True)
    assert {"epoch", "model", "optimizer", "rng", "scaler", "scheduler"} <= set(state)
    assert state["epoch"] == 0 and state["scheduler"]["last_epoch"] == 4
    capsys.readouterr()
    example.main(["--epochs", "2", "--samples", "128", "--warmup-steps", "4", "--out", str(tmp_path), "--resume"])
    printed = capsys.readouterr().out
    assert "epoch 0" not in printed and "epoch 1" in printed
    assert torch.load(tmp_path / "last.pt", weights_only=True)["scheduler"]["last_epoch"] == 8
