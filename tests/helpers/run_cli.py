"""Run a training script through ``traindoctor run`` in a fresh interpreter (and under torchrun)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")


def run_findings(tmp_path: Path, source: str, select: str, *, ranks: int = 1) -> list[dict[str, Any]]:
    """Write ``source`` as ``train.py``, run it under ``traindoctor run --select <select>``
    (with ``ranks`` > 1: under ``torchrun --nproc_per_node <ranks>``, gloo) and return the
    report's findings."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source).lstrip("\n"))
    out = tmp_path / "report.json"
    td = ["-m", "traindoctor", "run", "--select", select, "--output-format", "json", "-o", str(out), str(script)]
    if ranks > 1:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), *td]
    else:
        cmd = [sys.executable, *td]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(), cwd=tmp_path)
    assert out.exists(), proc.stderr[-3000:]
    report = json.loads(out.read_text())
    findings: list[dict[str, Any]] = report["findings"]
    return findings


def has_c_compiler() -> bool:
    """Whether torch.compile's CPU inductor backend can build its kernels here."""
    return any(shutil.which(cc) for cc in ("cc", "gcc", "clang", "g++"))


def torchrun_json(tmp_path: Path, source: str, ranks: int = 2) -> dict[int, Any]:
    """Run ``source`` (a script that writes ``result-<rank>.json``) under ``torchrun`` with
    ``ranks`` CPU processes (gloo) and return each rank's JSON."""
    script = tmp_path / "ddp_watch.py"
    script.write_text(textwrap.dedent(source).lstrip("\n"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), str(script)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {r: json.loads((tmp_path / f"result-{r}.json").read_text()) for r in range(ranks)}
