"""The doctor when a rank fails under torchrun (2 CPU ranks, gloo, DDP): raise, SIGKILL, hang,
and SIGTERM from torchrun reaching a survivor.

Rank 1 fails at step 3 while rank 0 waits for it in DDP's all-reduce. Every launch must end
within its bound (stall 3 s, report wait 10 s, plus start-up) and rank 0 must write a merged
partial report that names the failed rank, how it failed and where.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parent / "rank_failure_train.py"


def run_failing(tmp_path: Path, mode: str) -> tuple[dict, subprocess.CompletedProcess[str], float]:
    report = tmp_path / f"{mode}.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "traindoctor",
        "run",
        "--output-format",
        "json",
        "-o",
        str(report),
        "--threshold",
        f"distributed.stall_s={100 if mode == 'term' else 3}",
        "--threshold",
        "distributed.wait_s=10",
        str(SCRIPT),
        "--fail",
        mode,
    ]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0
    assert report.exists(), f"no merged report; torchrun said:\n{proc.stderr[-4000:]}"
    return json.loads(report.read_text()), proc, elapsed


@pytest.mark.parametrize("mode", ["raise", "kill", "hang", "term"])
def test_a_failing_rank_is_named_in_the_merged_partial_report(tmp_path, mode):
    report, proc, elapsed = run_failing(tmp_path, mode)
    env = report["environment"]
    assert report["partial"] is True
    first = env["first_failure"]
    assert first["rank"] == 1, report["notes"]
    assert report["notes"][0].startswith("first failure: rank 1 ")
    assert elapsed < 120  # bounded: never the gloo timeout (30 min)
    if mode == "raise":
        assert first["how"] == "raised"
        assert first["exception"] == "RuntimeError: rank 1 lost its data shard"
        assert first["where"].startswith("rank_failure_train.py:24 ")
        assert env["ranks_merged"] == [0, 1]
        assert "rank 0" in " ".join(report["notes"][1:])  # the survivor's evidence is merged
    elif mode == "term":  # rank 0 was busy in Python: torchrun's SIGTERM ends it with a report
        assert first["how"] == "raised"
        zero = env["ranks_failed"]["0"]
        assert zero["how"] == "terminated" and zero["signal"] == "SIGTERM"
        assert zero["where"].startswith("rank_failure_train.py:32 ")  # its time.sleep
        assert env["ranks_merged"] == [0, 1]
    elif mode == "kill":
        assert first["how"] == "killed"
        assert "SIGKILL" in report["notes"][0]
        assert env["ranks_merged"] == [0] and env["ranks_missing"] == [1]
        assert report["profile"]["per_rank"]["0"]["step_ms"] is not None
    else:
        assert first["how"] == "stalled" and first["in_torch"] is False
        assert first["where"].startswith("rank_failure_train.py:28 ")  # the time.sleep line
        zero = env["ranks_failed"]["0"]
        if zero["how"] == "stalled":  # waiting in the all-reduce when its own timer fired
            assert zero["in_torch"] is True
            assert any("backward" in frame for frame in zero["stack"])
        elif zero["how"] == "raised":  # or gloo noticed rank 1's exit first
            assert "gloo" in zero["exception"]
        else:  # or torchrun's SIGTERM reached it before the all-reduce raised
            assert zero["how"] == "terminated" and zero["signal"] == "SIGTERM"
        assert "exited with code 124" in proc.stderr
        assert env["ranks_merged"] == [0, 1]
