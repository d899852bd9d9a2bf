"""Lightning: seeded mistakes found with evidence, and a healthy twin with none, through
``traindoctor run`` and through ``traindoctor.integrations.lightning.DoctorCallback``
(with both the ``lightning`` and the ``pytorch_lightning`` package)."""

from __future__ import annotations

from pathlib import Path

import pytest

from framework_runs import Run, line_of, need, under_run, with_callback

need("lightning")

SCRIPT = "lightning_train.py"
SEEDED = ["--mistakes", "decay,bn,save,slow"]


@pytest.fixture(scope="module")
def seeded_run(tmp_path_factory) -> Run:
    # The callback is in the script too: under ``traindoctor run`` it must stay passive.
    return under_run(SCRIPT, [*SEEDED, "--callback"], tmp_path_factory.mktemp("lightning-seeded-run"))


@pytest.fixture(scope="module")
def seeded_callback(tmp_path_factory) -> Run:
    need("pytorch_lightning")
    return with_callback(SCRIPT, [*SEEDED, "--pytorch-lightning"], tmp_path_factory.mktemp("pl-seeded-cb"))


def _assert_seeded(run: Run) -> None:
    assert run.codes == ["TD102", "TD202", "TD204", "TD501"]
    td202 = run.finding("TD202")["evidence"]
    assert (td202["batchnorm_batch"], td202["backward_per_step"], td202["effective_batch"]) == (4, 4, 16)
    td204 = run.finding("TD204")["evidence"]
    assert td204["decayed"] == 4 and td204["kinds"] == {"bias": 2, "norm": 2}
    td102 = run.finding("TD102")["evidence"]
    assert td102["num_workers"] == 0 and td102["data_wait_share"] > 0.2 and td102["wait_ms_per_batch"] > 5
    td501 = run.finding("TD501")
    assert td501["evidence"]["missing_optimizers"] == ["AdamW"]
    assert td501["evidence"]["path"].endswith("weights.pt")
    assert td501["filename"].endswith(SCRIPT)
    assert td501["location"]["row"] == line_of(SCRIPT, "torch.save(self.state_dict()")


def test_seeded_mistakes_under_traindoctor_run(seeded_run: Run) -> None:
    _assert_seeded(seeded_run)
    assert "traindoctor report" not in seeded_run.stderr  # the passive callback printed nothing


def test_seeded_mistakes_through_the_callback_with_pytorch_lightning(seeded_callback: Run) -> None:
    _assert_seeded(seeded_callback)
    assert seeded_callback.report["environment"]["framework"] == "pytorch_lightning"
    err = seeded_callback.stderr
    # Each finding on Lightning's logger, then the text report with evidence, at the end of fit.
    for code, name in [("TD204", "weight-decay-on-bias-norm"), ("TD501", "checkpoint-without-optimizer")]:
        assert f"traindoctor {code} {name}:" in err
    report = err[err.index("traindoctor report"):]
    assert "Found 4 runtime findings" in report and "missing_optimizers: [AdamW]" in report
    assert "final train_loss" in seeded_callback.stdout


def test_healthy_twin_under_traindoctor_run_has_no_findings(tmp_path: Path) -> None:
    run = under_run(SCRIPT, [], tmp_path)
    assert run.report["findings"] == []
    assert run.report["profile"]["steps"] > 0
    # Lightning's own checkpoints were written (and not judged): fp16 plugin, scaler and clipping ran.
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]


def test_healthy_twin_through_the_callback_has_no_findings(tmp_path: Path) -> None:
    run = with_callback(SCRIPT, [], tmp_path)
    assert run.report["findings"] == [] and run.report["partial"] is False
    assert run.report["environment"]["framework"] == "lightning"
    assert "No runtime findings." in run.stderr
