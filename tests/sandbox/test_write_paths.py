"""One test per write path, for ``tune`` trials and ``verify-resume`` runs, in each sandbox that
works here (Landlock, bubblewrap): the user's files are identical afterwards (content, modes,
times, names: :func:`~tests.sandbox.helpers.snapshot`), and the script was still measured.

``scripts/writes.py`` tries every kind of write, each in its own sub-folder of the user's
folder, before it trains: the writes a copy-on-write view can take land in the view (``ok``),
the others are refused by the operating system or the sandbox (``refused``). One trial (one
run) per sandbox tries them all; each test reads its case's outcome and its folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.helpers import CHECKPOINT, SCRIPT, make_project, outcomes, remove_shm, snapshot
from traindoctor.resume.cli import main as verify_resume
from traindoctor.resume.runner import Scenario
from traindoctor.sandbox import BUBBLEWRAP, LANDLOCK, Sandbox, build
from traindoctor.sandbox.policy import works
from traindoctor.tune.script import Runner, TuneSettings

KINDS = [kind for kind in (LANDLOCK, BUBBLEWRAP) if works(kind)]
pytestmark = pytest.mark.skipif(not KINDS, reason="neither Landlock nor bubblewrap works here")

#: The writes a view cannot take: the operating system or the sandbox refuses them (a write
#: through ``dir_fd`` to a link, a write, a hard link or a change of mode of the user's file by
#: its absolute path or by a descriptor); the rest land in the view. The subprocess cases check inside that
#: a new file lands in the view and that a write through a link (``sh``'s ``>``, ``touch``) fails.
REFUSED = {"os_open_dir_fd", "chmod_user", "chmod_descriptor", "hardlink", "absolute"}
CASES = [
    "rename",
    "replace",
    "move",
    "remove",
    "truncate",
    "fileio",
    "os_open",
    "os_open_dir_fd",
    "chmod",
    "chmod_user",
    "chmod_descriptor",
    "symlink",
    "hardlink",
    "subprocess_sh",
    "subprocess_rm",
    "subprocess_touch",
    "dev_shm",
    "sqlite",
    "r_plus",
    "memmap",
    "absolute",
    "hidden",
]


@dataclass
class Done:
    """One run that tried every case: the user's folder, its snapshots before, the run's log."""

    project: Path
    before: dict[str, dict[str, tuple[object, ...]]]
    log: str
    view: Path
    result: dict[str, Any]


def _project(folder: Path) -> tuple[Path, dict[str, dict[str, tuple[object, ...]]]]:
    project = make_project(folder / "project", CASES)
    before = {case: snapshot(project / case) for case in CASES}
    before[""] = snapshot(project)
    return project, before


@pytest.fixture(scope="module", params=KINDS)
def tune_trial(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Done]:
    """One tune trial per sandbox, with two DataLoader workers (shared memory and semaphores)."""
    folder = tmp_path_factory.mktemp(f"tune-{request.param}")
    project, before = _project(folder)
    settings = TuneSettings(budget=5, seconds=0.05, max_steps=3, sandbox=request.param)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        trials = Runner(str(SCRIPT), ["--ckpt", "ckpt/last.pt", "--steps", "1000"], settings, folder / "scratch")
        try:
            out = trials.run({"mode": "trial", "config": {"num_workers": 2, "torch_threads": 1}, "site": None})
        finally:
            trials.close()
    yield Done(project, before, Path(out["log"]).read_text(), _trial_view(folder / "scratch"), out)
    remove_shm(project)


@pytest.fixture(scope="module", params=KINDS)
def resume_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Done]:
    """One verify-resume run (the reference scenario, 12 steps) per sandbox, given the user's
    checkpoint as an absolute file argument."""
    folder = tmp_path_factory.mktemp(f"resume-{request.param}")
    project, before = _project(folder)
    root = folder / "runs"
    root.mkdir()
    box = Sandbox(request.param, (os.path.realpath(root),))
    view = build(str(project), str(root / "reference-cwd"), skip=(str(root),))
    args = ["--ckpt", str(project / "ckpt" / "last.pt")]
    run = Scenario("reference", "reference", str(SCRIPT), args, view, 12, sandbox=box).start().wait(300)
    record = {"returncode": run.returncode, **(run.record or {})}
    yield Done(project, before, run.log.read_text(), root / "reference-cwd", record)
    remove_shm(project)


def _trial_view(scratch: Path) -> Path:
    """The first trial's view of the user's folder (below the mirrors of its parent folders)."""
    view = Path(json.loads((scratch / "trial-01" / "spec.json").read_text())["view"])
    assert view.is_relative_to((scratch / "trial-01" / "view").resolve())
    return view


def _expected(case: str) -> str:
    return "refused" if case in REFUSED else "ok"


@pytest.mark.parametrize("case", CASES)
def test_a_tune_trial_leaves_the_users_files_identical(case: str, tune_trial: Done) -> None:
    assert tune_trial.result["status"] == "complete", tune_trial.log  # measured
    assert tune_trial.result["segments"][0]["samples_per_s"] > 0
    assert outcomes(tune_trial.log).get(case) == _expected(case), tune_trial.log
    assert snapshot(tune_trial.project / case) == tune_trial.before[case]


def test_a_tune_trial_saves_to_its_file_argument_in_the_view(tune_trial: Done) -> None:
    assert snapshot(tune_trial.project) == tune_trial.before[""]  # the whole folder
    assert (tune_trial.project / "ckpt" / "last.pt").read_bytes() == CHECKPOINT
    saved = tune_trial.view / "ckpt" / "last.pt"
    assert not saved.is_symlink() and saved.read_bytes() != CHECKPOINT and saved.stat().st_size > 100


@pytest.mark.parametrize("case", CASES)
def test_a_verify_resume_run_leaves_the_users_files_identical(case: str, resume_run: Done) -> None:
    record = resume_run.result
    assert record["returncode"] == 0, resume_run.log
    assert record["status"] == "finished" and record["last_step"] == 12, resume_run.log  # measured: 12 steps
    assert outcomes(resume_run.log).get(case) == _expected(case), resume_run.log
    assert snapshot(resume_run.project / case) == resume_run.before[case]


def test_a_verify_resume_run_saves_to_its_absolute_file_argument_in_the_view(resume_run: Done) -> None:
    assert snapshot(resume_run.project) == resume_run.before[""]
    saved = resume_run.view / "ckpt" / "last.pt"
    assert not saved.is_symlink() and saved.read_bytes() != CHECKPOINT and saved.stat().st_size > 100


def test_an_absolute_file_argument_of_a_tune_trial_is_redirected_into_the_view(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = make_project(tmp_path / "project", [])
    before = snapshot(project)
    monkeypatch.chdir(project)
    settings = TuneSettings(budget=5, seconds=0.05, max_steps=3)
    trials = Runner(str(SCRIPT), ["--ckpt", str(project / "ckpt" / "last.pt")], settings, tmp_path / "scratch")
    try:
        out = trials.run({"mode": "trial", "config": {"num_workers": 0, "torch_threads": 1}, "site": None})
    finally:
        trials.close()
    assert out["status"] == "complete", Path(out["log"]).read_text()
    assert snapshot(project) == before
    saved = _trial_view(tmp_path / "scratch") / "ckpt" / "last.pt"
    assert not saved.is_symlink() and saved.stat().st_size > 100  # the trial's own checkpoint


def test_verify_resume_with_every_write_and_a_checkpoint_argument_is_exact_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the case: `-- --ckpt ckpt/last.pt` used to overwrite the user's step-40 checkpoint
    project, before = _project(tmp_path)
    monkeypatch.chdir(project)
    argv = [str(SCRIPT), "--resume-args", "--resume", "--steps", "12", "--interrupt-at", "7"]
    try:
        code = verify_resume([*argv, "--output-format", "json", "--", "--ckpt", "ckpt/last.pt"])
        result = json.loads(capsys.readouterr().out)
        assert code == 0, result
        assert result["exact"] is True and result["checkpoint_step"] == 10
        assert snapshot(project) == before[""]
        assert (project / "ckpt" / "last.pt").read_bytes() == CHECKPOINT
    finally:
        remove_shm(project)
