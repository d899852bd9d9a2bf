"""Hugging Face Trainer: seeded mistakes found with evidence, and a healthy twin with none, through
``traindoctor run`` and through ``traindoctor.integrations.transformers.DoctorCallback``.
A one-layer BERT built from a config: nothing is downloaded (``HF_HUB_OFFLINE=1``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from framework_runs import Pending, Run, line_of, need, under_run, with_callback

need("transformers", "accelerate")

SCRIPT = "transformers_train.py"
SEEDED = ["--mistakes", "decay,save,slow"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Iterator[dict[str, Pending]]:
    """The module's runs (each starts when a test first asks for its result)."""
    tmp = tmp_path_factory.mktemp
    started = {
        "seeded_run": under_run(SCRIPT, [*SEEDED, "--callback"], tmp("hf-seeded-run")),  # callback passive
        "seeded_callback": with_callback(SCRIPT, SEEDED, tmp("hf-seeded-cb")),
        "healthy_run": under_run(SCRIPT, [], tmp("hf-healthy-run")),
        "healthy_callback": with_callback(SCRIPT, [], tmp("hf-healthy-cb")),
    }
    yield started
    for pending in started.values():
        pending.close()


def _assert_seeded(run: Run) -> None:
    assert run.codes == ["TD102", "TD204", "TD501"]  # a weights-only periodic save: TD501 alone
    td204 = run.finding("TD204")["evidence"]
    # every bias and LayerNorm parameter of the one-layer BERT, found by module type
    assert td204["decayed"] == 14 and td204["kinds"] == {"bias": 8, "norm": 6}
    td102 = run.finding("TD102")["evidence"]
    assert td102["num_workers"] == 0 and td102["data_wait_share"] > 0.2 and td102["wait_ms_per_batch"] > 5
    td501 = run.finding("TD501")
    assert td501["evidence"]["missing_optimizers"] == ["AdamW"]
    assert td501["filename"].endswith(SCRIPT)
    assert td501["location"]["row"] == line_of(SCRIPT, "torch.save(model.state_dict()")


def test_seeded_mistakes_under_traindoctor_run(runs) -> None:
    run = runs["seeded_run"].result()
    _assert_seeded(run)
    assert "traindoctor report" not in run.stderr


def test_seeded_mistakes_through_the_callback(runs) -> None:
    run = runs["seeded_callback"].result()
    _assert_seeded(run)
    assert run.report["environment"]["framework"] == "transformers"
    # The loader advice names the TrainingArguments option to change.
    assert "TrainingArguments(dataloader_num_workers=N)" in run.finding("TD102")["help"]
    # The error is logged on the transformers logger, then the text report is printed.
    assert "traindoctor TD501 checkpoint-without-optimizer:" in run.stderr
    assert "Found 3 runtime findings" in run.stderr.split("traindoctor report", 1)[1]


@pytest.mark.parametrize("mode", ["healthy_run", "healthy_callback"])
def test_healthy_twin_has_no_findings(runs, mode: str) -> None:
    run = runs[mode].result()
    # The Trainer's default AdamW keeps biases/LayerNorm out of weight decay (the audit reads the
    # real groups); its checkpoints (weights, optimizer.pt, scheduler.pt, rng_state.pth) and its
    # evaluation (eval mode, no grad) are the Trainer's business: nothing to report.
    assert run.report["findings"] == []
    assert run.report["profile"]["steps"] == 16
    out = runs[mode].report.parent
    for step in (8, 16):
        saved = {p.name for p in (out / "hf" / f"checkpoint-{step}").iterdir()}
        assert {"optimizer.pt", "scheduler.pt", "rng_state.pth"} <= saved
