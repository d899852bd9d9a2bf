"""Report hygiene of `traindoctor run` (issue 9): a raising script gives a partial report, SIGTERM
writes the partial report like Ctrl-C, JSON without -o parses even when the script prints, a
directory is a one-line error, and a script that exits before training shows no empty profile."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from traindoctor.doctor.cli import EXIT_TERMINATED, main

ROOT = Path(__file__).resolve().parents[2]

LOOP = textwrap.dedent(
    """
    import os, sys, time
    import torch
    from torch import nn
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    print("hello from the script")
    os.system("echo output of a child process")
    for i in range(STEPS):
        model(torch.randn(4, 2)).sum().backward()
        opt.step()
        opt.zero_grad()
        print("step", i, flush=True)
        if i == 3:
            print("READY", file=sys.stderr, flush=True)
        time.sleep(PAUSE)
    """
)


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")


def _script(tmp_path: Path, steps: int = 5, pause: float = 0.0, tail: str = "") -> Path:
    path = tmp_path / "train.py"
    path.write_text(LOOP.replace("STEPS", str(steps)).replace("PAUSE", str(pause)) + tail)
    return path


def test_json_without_output_file_is_parseable_when_the_script_prints(tmp_path: Path) -> None:
    script = _script(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "traindoctor", "run", "--output-format", "json", str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # stdout holds the report only
    assert report["profile"]["steps"] == 5
    assert "hello from the script" in proc.stderr and "step 4" in proc.stderr
    assert "output of a child process" in proc.stderr  # file descriptor 1 was redirected too


def test_a_raising_script_gives_a_partial_report(tmp_path: Path, capsys) -> None:
    script = _script(tmp_path, tail="raise ValueError('bad config')\n")
    out = tmp_path / "r.json"
    assert main(["--output-format", "json", "-o", str(out), str(script)]) == 1
    report = json.loads(out.read_text())
    assert report["partial"] is True and report["profile"]["partial"] is True
    assert report["environment"]["partial_reason"] == "the script raised ValueError"
    assert main([str(script)]) == 1
    assert "traindoctor: partial report (the script raised ValueError)" in capsys.readouterr().out


def test_sigterm_writes_the_partial_report(tmp_path: Path) -> None:
    script = _script(tmp_path, steps=100000, pause=0.01)
    out = tmp_path / "r.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "traindoctor", "run", "--output-format", "json", "-o", str(out), str(script)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=tmp_path,
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if "READY" in line or not line:
                break
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == EXIT_TERMINATED
    finally:
        if proc.poll() is None:
            proc.kill()
    report = json.loads(out.read_text())
    assert report["partial"] is True and report["profile"]["steps"] >= 4
    assert report["environment"]["partial_reason"] == "the run was terminated (SIGTERM)"


def test_a_directory_is_a_one_line_error(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "project"
    folder.mkdir()
    assert main([str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a directory" in err and "Traceback" not in err


def test_a_script_that_exits_before_training_prints_no_empty_profile(tmp_path: Path, capsys) -> None:
    script = tmp_path / "cli.py"
    script.write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--lr', type=float)\np.parse_args()\n"
    )
    assert main([str(script), "--lr", "fast"]) == 2
    out = capsys.readouterr().out
    assert "Profile:" not in out and "unknown" not in out
    assert "No training step ran (the script ended with exit code 2 first)" in out
