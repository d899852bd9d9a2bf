"""The checker and the doctor agree on the same saves (issue 9): `check` and `run` over the same
example scripts report the same TD501-TD504 codes on the same lines, because both classify a save
with one definition of checkpoint vs export (``traindoctor.facts.checkpoint.kinds``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traindoctor.check.engine import check_source, instantiate
from traindoctor.config import Settings
from traindoctor.doctor.cli import main as run_main
from traindoctor.facts.checkpoint.kinds import CHECKPOINT, EXPORT, SaveFacts, export_name, save_kind

EXAMPLES = Path(__file__).resolve().parent / "agreement"
CODES = ("TD501", "TD502", "TD503", "TD504")

#: What both must say for each example (and therefore what they agree on).
EXPECTED = {
    "best_model_export.py": set(),  # best-so-far weights, never read back: an export
    # bare weights: TD501 alone (the full-state checkpoint it asks for holds the RNG state too)
    "best_model_resumed.py": {("TD501", 24)},  # the resume path reads it back
    "periodic_weights.py": {("TD501", 20)},  # weights saved every epoch
    "full_without_rng.py": {("TD504", 18)},  # optimizer and epoch, but no RNG state
    # the periodic checkpoint lacks the optimizer state that only the best-so-far save holds
    "periodic_beside_best.py": {("TD501", 19)},
    "complete_checkpoint.py": set(),  # traindoctor.checkpoint.save holds everything
    # Shaped like real scripts (issue 9's rerun): a best-so-far guard recognised by its shape
    # (`if score > top: top = score`), whatever the names say.
    "callback_top_score.py": set(),  # minGPT adder: a trainer's callback saves the top score
    "loop_running_best.py": set(),  # word_language_model: torch.save(model, f) on a lower loss
}


def _checked(script: Path) -> set[tuple[str, int]]:
    result = check_source(script.read_bytes(), str(script), Settings(), instantiate(CODES))
    return {(f.code, f.location.row) for f in result.findings if f.code in CODES}


def _ran(script: Path, tmp_path: Path, monkeypatch) -> set[tuple[str, int]]:
    monkeypatch.chdir(tmp_path)  # the scripts write their checkpoints to the working folder
    out = tmp_path / "report.json"
    assert run_main(["--select", ",".join(CODES), "--output-format", "json", "-o", str(out), str(script)]) == 0
    report = json.loads(out.read_text())
    return {(f["code"], f["location"]["row"]) for f in report["findings"]}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_check_and_run_report_the_same_checkpoint_codes(name: str, tmp_path: Path, monkeypatch) -> None:
    script = EXAMPLES / name
    checked = _checked(script)
    ran = _ran(script, tmp_path, monkeypatch)
    assert checked == ran == EXPECTED[name]


def test_one_definition_of_checkpoint_and_export() -> None:
    assert save_kind(SaveFacts(holds_resume_state=True, quality_guarded=True)) == CHECKPOINT
    assert save_kind(SaveFacts(read_back=True, export_name=True)) == CHECKPOINT
    assert save_kind(SaveFacts(quality_guarded=True)) == EXPORT
    assert save_kind(SaveFacts(export_name=True)) == EXPORT
    assert save_kind(SaveFacts(in_training_loop=False)) == EXPORT
    assert save_kind(SaveFacts()) == CHECKPOINT  # weights saved periodically in the loop
    assert export_name("runs/model_best.pth") and export_name(["final_", ".pt"])
    assert not export_name("ckpt/last.pt") and not export_name(None)


def test_the_shared_definition_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import sys, traindoctor.facts.checkpoint.kinds, traindoctor.facts.checkpoint.static.index; print('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
    )
    assert out.stdout.strip() == "False", out.stderr
