"""``traindoctor verify-resume`` on tiny real training scripts (each runs the script 3 times)."""

from __future__ import annotations

import json
from pathlib import Path

from traindoctor.resume.cli import main, split_argv

SCRIPTS = Path(__file__).parent / "scripts"


def _verify(capsys, script: str, steps: int, interrupt_at: int, fmt: str = "json"):
    code = main([str(SCRIPTS / script), "--resume-args", "--resume", "--steps", str(steps),
                 "--interrupt-at", str(interrupt_at), "--output-format", fmt])
    out = capsys.readouterr().out
    return code, (json.loads(out) if fmt == "json" else out)


def test_model_only_checkpoint_is_caught_as_lost_optimizer_state(capsys):
    code, result = _verify(capsys, "model_only.py", steps=9, interrupt_at=4)
    assert code == 1
    assert result["exact"] is False
    assert result["checkpoint_step"] == 6
    # Same weights and batch at step 7, different update: the loss first differs at step 8.
    assert result["first_divergent_step"] == 8
    assert result["cause"] == "optimizer state lost (momentum/moments zero after resume)"
    assert "held no state" in result["explanation"]
    assert "momentum_buffer for 4 parameter(s)" in result["explanation"]


def test_missing_scheduler_state_is_caught_as_scheduler_restart(capsys):
    code, out = _verify(capsys, "no_scheduler.py", steps=10, interrupt_at=4, fmt="text")
    assert code == 1
    lines = out.splitlines()
    assert lines[0].endswith("interrupted after the checkpoint written at step 6, resumed for "
                             "steps 7-10")
    assert lines[1].startswith("resume is NOT exact: first divergent step 10: loss ")
    assert lines[2] == "cause: scheduler restarted (LR differs)"
    assert lines[3] == "  at step 9 the learning rate is 0.025, the uninterrupted run had 0.0125"


def test_traindoctor_checkpoint_resumes_bit_exactly_mid_epoch_with_workers(capsys):
    code, out = _verify(capsys, "full_state.py", steps=12, interrupt_at=7, fmt="text")
    assert code == 0, out
    # Checkpoint at step 9: epoch 1 covers steps 6-10, so the resume is mid-epoch.
    assert "interrupted after the checkpoint written at step 9" in out
    assert "resume is exact: 12 steps, per-step losses and final model/optimizer state " \
           "identical (bitwise)" in out


def test_our_options_are_split_from_the_scripts():
    ours, script, rest = split_argv(["train.py", "--lr", "0.1", "--resume-args", "--resume x",
                                     "--steps=8", "--", "--steps", "3"])
    assert script == "train.py"
    assert ours == ["--resume-args=--resume x", "--steps=8"]
    assert rest == ["--lr", "0.1", "--steps", "3"]


def test_missing_script_is_a_clear_error(capsys, tmp_path):
    assert main([str(tmp_path / "nope.py"), "--resume-args", "--resume"]) == 2
    assert "script not found" in capsys.readouterr().err
