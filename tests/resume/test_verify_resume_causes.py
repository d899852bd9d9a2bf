"""verify-resume names the state that explains the first divergent step (issue 25): a script that
seeds torch again at start and saves no RNG state gets the RNG cause (not "epoch counter off by
one"), a stale checkpoint left in the folder is never read as the run's own, and "cannot tell"
is the answer when no recorded state explains the divergence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from traindoctor.resume.cli import main
from traindoctor.resume.compare import CAUSE_RNG, CAUSE_UNKNOWN, diagnose

SCRIPT = Path(__file__).parent / "scripts" / "reseeds_rng.py"


def _verify(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main([str(SCRIPT), *args, "--steps", "12", "--interrupt-at", "3", "--output-format", "json"])
    return code, json.loads(capsys.readouterr().out)


def _stale_checkpoint(folder: Path) -> None:
    (folder / "ckpt").mkdir()
    torch.manual_seed(123)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 0}, folder / "ckpt/last.pt")


def test_reseeding_without_rng_state_is_the_rng_cause_and_a_stale_checkpoint_is_not_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stale_checkpoint(tmp_path)
    before = (tmp_path / "ckpt/last.pt").read_bytes()
    monkeypatch.chdir(tmp_path)
    code, result = _verify(capsys, "--resume-args", "--resume ckpt/last.pt")
    assert code == 1
    # 4 batches per epoch, saved after epoch 0: the resumed run's shuffle is epoch 0's again,
    # one epoch away, yet the epoch counter is right and the generator restarted
    assert result["checkpoint_step"] == 4 and result["first_divergent_step"] == 5
    assert result["cause"] == CAUSE_RNG
    assert result["explanation"].startswith(
        "at step 5 the resumed run's torch CPU generator is in the state the uninterrupted run's had at step 1"
    )
    assert "draws step 1's batch again" in result["explanation"]
    assert not any("epoch" in other for other in result["also"])
    assert result["notes"] == [
        "ckpt/last.pt (in --resume-args) existed before the runs; they did not see it: the resumed run "
        "read the checkpoint the interrupted run wrote there"
    ]
    assert (tmp_path / "ckpt/last.pt").read_bytes() == before  # the user's file is untouched


def test_a_resume_argument_naming_a_file_the_run_does_not_write_is_named_stale(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stale_checkpoint(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, result = _verify(capsys, "--save", "ckpt/run.pt", "--resume-args", "--resume ckpt/last.pt")
    assert code == 1
    assert result["cause"] == "the resumed run crashed"  # not "model state not restored" from the stale file
    assert "FileNotFoundError" in result["explanation"]
    assert result["notes"] == [
        "ckpt/last.pt (in --resume-args) existed before the runs, but the interrupted run did not write it: "
        "it is a file left by an earlier run, and the resumed run did not see it; point --resume-args at "
        "the path the script saves to"
    ]


def _record(inputs: list[str], rng: list[str], epochs: int = 4) -> dict:
    steps = {
        str(s + 1): {"inputs": i, "rng": {"torch": r}, "lr": {"0": [0.1]}} for s, (i, r) in enumerate(zip(inputs, rng))
    }
    return {"steps": steps, "loader_lengths": [epochs]}


def test_a_batch_one_epoch_away_with_a_generator_that_differs_without_replay_cannot_tell() -> None:
    ref = _record(list("abcdefgh"), ["r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8"])
    res = _record(list("abcdabcd"), ["r1", "r2", "r3", "r4", "x5", "x6", "x7", "x8"])
    cause, explanation, step, _ = diagnose(ref, res, 4, 8, 8, {"torch"}, divergent=5)
    assert (cause, step) == (CAUSE_UNKNOWN, 5)
    assert explanation.startswith(
        "cannot tell: the resumed run's batch at step 5 is the uninterrupted run's batch of step 1"
    )
    assert "either explains this batch" in explanation


def test_a_difference_after_the_first_divergent_step_does_not_explain_it() -> None:
    ref = _record(list("abcdefgh"), ["r"] * 8)
    res = _record(list("abcdefgh"), ["r"] * 8)
    res["steps"]["8"]["lr"] = {"0": [0.2]}
    cause, explanation, _, _ = diagnose(ref, res, 4, 8, 8, {"torch"}, divergent=6)
    assert cause == CAUSE_UNKNOWN
    assert explanation.startswith("cannot tell: weights, optimizer state")
    assert "(later: scheduler restarted (LR differs): at step 8 the learning rate is 0.2" in explanation
    assert diagnose(ref, res, 4, 8, 8, {"torch"}, divergent=8)[0] == "scheduler restarted (LR differs)"
