"""Lightning: seeded mistakes found with evidence, and a healthy twin with none, through
``traindoctor run`` and through ``traindoctor.integrations.lightning.DoctorCallback``
(with both the ``lightning`` and the ``pytorch_lightning`` package)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from framework_runs import Pending, Run, line_of, need, under_run, with_callback

need("lightning", "pytorch_lightning")

SCRIPT = "lightning_train.py"
SEEDED = ["--mistakes", "decay,bn,save,slow"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Iterator[dict[str, Pending]]:
    """The module's runs (each starts when a test first asks for its result)."""
    tmp = tmp_path_factory.mktemp
    started = {
        # The callback is in the script too: under ``traindoctor run`` it must stay passive.
        "seeded_run": under_run(SCRIPT, [*SEEDED, "--callback"], tmp("l-seeded-run")),
        "seeded_callback": with_callback(SCRIPT, [*SEEDED, "--pytorch-lightning"], tmp("pl-seeded-cb")),
        "healthy_run": under_run(SCRIPT, [], tmp("l-healthy-run")),
        "healthy_callback": with_callback(SCRIPT, [], tmp("l-healthy-cb")),
    }
    yield started
    for pending in started.values():
        pending.close()


def _assert_seeded(run: Run) -> None:
    assert run.codes == [
        "TD102",
        "TD202",
        "TD204",
        "TD210",
        "TD501",
    ]  # a weights-only periodic save: TD501 alone (its fix saves the RNG too); TD210: Linear -> BatchNorm1d
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


def test_seeded_mistakes_under_traindoctor_run(runs) -> None:
    run = runs["seeded_run"].result()
    _assert_seeded(run)
    assert "traindoctor report" not in run.stderr  # the passive callback printed nothing


def test_seeded_mistakes_through_the_callback_with_pytorch_lightning(runs) -> None:
    run = runs["seeded_callback"].result()
    _assert_seeded(run)
    assert run.report["environment"]["framework"] == "pytorch_lightning"
    # Each finding on Lightning's logger, then the text report with evidence, at the end of fit.
    for code, name in [("TD204", "weight-decay-on-bias-norm"), ("TD501", "checkpoint-without-optimizer")]:
        assert f"traindoctor {code} {name}:" in run.stderr
    report = run.stderr[run.stderr.index("traindoctor report") :]
    assert "Found 5 runtime findings" in report and "missing_optimizers: [AdamW]" in report
    assert "final train_loss" in run.stdout


def test_healthy_twin_under_traindoctor_run_has_no_findings(runs) -> None:
    run = runs["healthy_run"].result()
    assert run.report["findings"] == []
    assert run.report["profile"]["steps"] == 8
    # Lightning's own checkpoints were written (and not judged); fp16 plugin, scaler and clipping ran.
    ckpt = runs["healthy_run"].report.parent / "ckpt"
    assert sorted(p.name for p in ckpt.iterdir()) == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]


def test_healthy_twin_through_the_callback_has_no_findings(runs) -> None:
    run = runs["healthy_callback"].result()
    assert run.report["findings"] == [] and run.report["partial"] is False
    assert run.report["environment"]["framework"] == "lightning"
    assert "No runtime findings." in run.stderr


def test_an_exception_in_fit_gives_a_partial_report_before_the_traceback(tmp_path) -> None:
    run = with_callback(
        SCRIPT, ["--mistakes", "decay", "--raise-at-step", "3", "--epochs", "1"], tmp_path, returncode=1
    ).result()
    assert run.report["partial"] is True and run.codes == ["TD204"]
    err = run.stderr
    assert "partial report" in err
    assert err.index("traindoctor report") < err.index("RuntimeError: seeded failure at step 3")
