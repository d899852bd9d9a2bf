"""Where no sandbox works, ``tune`` and ``verify-resume`` refuse to start unless ``--allow-writes``
is given, and then say plainly that the runs' writes may reach the user's files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import traindoctor.tune.script
from tests.sandbox.helpers import CHECKPOINT, SCRIPT, make_project, snapshot
from traindoctor.resume.cli import main as verify_resume
from traindoctor.sandbox import NONE, SandboxUnavailable, detect, policy
from traindoctor.tune.script import TuneScriptError
from traindoctor.tune.script_cli import main as tune


@pytest.fixture
def no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither Landlock nor bubblewrap works on this machine."""
    monkeypatch.setattr(policy, "works", lambda kind: False)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = make_project(tmp_path / "project", [])
    monkeypatch.chdir(folder)
    return folder


def test_detect_refuses_without_a_sandbox_and_names_the_way_out(no_sandbox: None) -> None:
    for kind in ("auto", "none", "landlock", "bubblewrap"):
        with pytest.raises(SandboxUnavailable, match="--allow-writes"):
            detect(kind)
    assert detect("auto", allow_writes=True) == NONE
    with pytest.raises(SandboxUnavailable, match="unknown sandbox 'chroot'"):
        detect("chroot", allow_writes=True)


def test_tune_refuses_to_start_without_a_sandbox(
    no_sandbox: None, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(project)
    calls: list[object] = []
    monkeypatch.setattr(traindoctor.tune.script, "tune_script", lambda *a, **k: calls.append(a))
    code = tune([str(SCRIPT), "--ckpt", "ckpt/last.pt"])
    err = capsys.readouterr().err
    assert code == 2 and calls == []  # no trial started
    assert "no sandbox for the runs on this machine" in err and "pass --allow-writes" in err
    assert snapshot(project) == before


def test_tune_with_allow_writes_warns_and_runs_without_a_sandbox(
    no_sandbox: None, project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, Any] = {}

    def stop(script: str, args: list[str], *, settings: Any, progress: Any) -> None:
        seen.update(script=script, args=args, sandbox=settings.sandbox, allow_writes=settings.allow_writes)
        raise TuneScriptError("stopped by the test")

    monkeypatch.setattr(traindoctor.tune.script, "tune_script", stop)
    code = tune(["--allow-writes", str(SCRIPT), "--ckpt", "ckpt/last.pt"])
    err = capsys.readouterr().err
    assert code == 2 and "stopped by the test" in err
    assert seen == {"script": str(SCRIPT), "args": ["--ckpt", "ckpt/last.pt"], "sandbox": NONE, "allow_writes": True}
    assert "warning: no sandbox (Landlock or bubblewrap) on this machine, and --allow-writes was given" in err


def test_verify_resume_refuses_to_start_without_a_sandbox(
    no_sandbox: None, project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(project)
    runs = tmp_path / "runs"
    argv = [str(SCRIPT), "--resume-args", "--resume", "--steps", "12", "--interrupt-at", "7", "--workdir", str(runs)]
    code = verify_resume([*argv, "--output-format", "json", "--", "--ckpt", "ckpt/last.pt"])
    result = json.loads(capsys.readouterr().out)
    assert code == 2 and "pass --allow-writes" in result["error"]
    assert not runs.exists()  # no run started
    assert snapshot(project) == before


def test_verify_resume_with_allow_writes_warns_and_python_writes_still_land_in_the_view(
    no_sandbox: None, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = snapshot(project)
    argv = [str(SCRIPT), "--resume-args", "--resume", "--steps", "12", "--interrupt-at", "7", "--allow-writes"]
    code = verify_resume([*argv, "--output-format", "json", "--", "--ckpt", "ckpt/last.pt"])
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert code == 0, result
    assert result["exact"] is True and result["checkpoint_step"] == 10 and result["sandbox"] == NONE
    assert "warning: no sandbox (Landlock or bubblewrap)" in captured.err
    assert snapshot(project) == before  # torch.save to the argument: a private copy in the view
    assert (project / "ckpt" / "last.pt").read_bytes() == CHECKPOINT
