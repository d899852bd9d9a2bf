"""``traindoctor verify-resume`` on tiny real training scripts (each runs the script 3 times)."""

from __future__ import annotations

import json
from pathlib import Path

from traindoctor.resume.cli import main, split_argv

SCRIPTS = Path(__file__).parent / "scripts"


def _verify(capsys, script: str, steps: int, interrupt_at: int, fmt: str = "json"):
    code = main(
        [
            str(SCRIPTS / script),
            "--resume-args",
            "--resume",
            "--steps",
            str(steps),
            "--interrupt-at",
            str(interrupt_at),
            "--output-format",
            fmt,
        ]
    )
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
    assert lines[0].endswith("interrupted after the checkpoint written at step 6, resumed for steps 7-10")
    assert lines[1].startswith("resume is NOT exact: first divergent step 10: loss ")
    assert lines[2] == "cause: scheduler restarted (LR differs)"
    assert lines[3] == "  at step 9 the learning rate is 0.025, the uninterrupted run had 0.0125"


def test_traindoctor_checkpoint_resumes_bit_exactly_mid_epoch_with_workers(capsys):
    code, out = _verify(capsys, "full_state.py", steps=12, interrupt_at=7, fmt="text")
    assert code == 0, out
    # Checkpoint at step 9: epoch 1 covers steps 6-10, so the resume is mid-epoch.
    assert "interrupted after the checkpoint written at step 9" in out
    assert "resume is exact: 12 steps, per-step losses and final model/optimizer state identical (bitwise)" in out


def test_our_options_are_split_from_the_scripts():
    ours, script, rest = split_argv(
        ["train.py", "--lr", "0.1", "--resume-args", "--resume x", "--steps=8", "--", "--steps", "3"]
    )
    assert script == "train.py"
    assert ours == ["--resume-args=--resume x", "--steps=8"]
    assert rest == ["--lr", "0.1", "--steps", "3"]


def test_missing_script_is_a_clear_error(capsys, tmp_path):
    assert main([str(tmp_path / "nope.py"), "--resume-args", "--resume"]) == 2
    assert "script not found" in capsys.readouterr().err


def test_resuming_the_saved_epoch_instead_of_the_next_is_named(capsys):
    code, result = _verify(capsys, "epoch_off_by_one.py", steps=12, interrupt_at=5)
    assert code == 1
    assert result["checkpoint_step"] == 8  # saved at the end of epoch 1 (4 steps per epoch)
    assert result["first_divergent_step"] == 9
    assert result["cause"] == "epoch counter off by one"
    assert result["explanation"] == ("at step 9 set_epoch(1) was called; the uninterrupted run was in epoch 2")


def test_a_gradscaler_left_out_of_the_checkpoint_is_named_loss_scale_reset(capsys):
    code, result = _verify(capsys, "loss_scale_reset.py", steps=12, interrupt_at=5)
    assert code == 1
    assert result["checkpoint_step"] == 6
    assert result["first_divergent_step"] == 7
    assert result["cause"] == "loss scale reset"
    assert result["explanation"] == ("at step 7 the GradScaler scale is 256, the uninterrupted run had 2048")


def _verify_ranks(capsys, kind: str, fmt: str = "json"):
    code = main(
        [
            "--nproc-per-node",
            "2",
            str(SCRIPTS / "dist_train.py"),
            "--kind",
            kind,
            "--resume-args",
            "--resume",
            "--steps",
            "12",
            "--interrupt-at",
            "5",
            "--output-format",
            fmt,
        ]
    )
    out = capsys.readouterr().out
    return code, (json.loads(out) if fmt == "json" else out)


def test_two_rank_fsdp2_run_with_traindoctor_checkpoints_resumes_exactly_on_each_rank(capsys):
    code, out = _verify_ranks(capsys, "fsdp", fmt="text")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].endswith(
        "2 ranks (torchrun), 12 steps; interrupted after the checkpoint written at step 8, resumed for steps 9-12"
    )
    assert lines[1] == (
        "resume is exact on every rank (2): per-step losses and final model/optimizer state identical (bitwise)"
    )
    assert lines[2].startswith("rank 0: resume is exact") and lines[3].startswith("rank 1: ")


def test_two_rank_ddp_run_saving_the_model_on_rank_0_only_loses_momentum_on_every_rank(capsys):
    code, result = _verify_ranks(capsys, "ddp-model-only")
    assert code == 1
    assert result["checkpoint_step"] == 8  # rank 0 saved; rank 1 was stopped at the same step
    assert result["first_divergent_step"] == 9 and result["first_divergent_rank"] == 0
    assert result["cause"] == "optimizer state lost (momentum/moments zero after resume)"
    for rank in ("0", "1"):
        verdict = result["ranks"][rank]
        assert verdict["exact"] is False and verdict["first_divergent_step"] == 9
        assert verdict["cause"] == result["cause"]
