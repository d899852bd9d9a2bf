"""Run the seeded framework scripts (``scripts/``) under ``traindoctor run`` or with their callback.

Each run is a subprocess: the frameworks configure process-wide logging, warnings and RNG, which
must not leak into other tests. Everything is offline (``HF_HUB_OFFLINE=1``), CPU-only and small.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parent / "scripts"
SRC = Path(__file__).resolve().parents[2] / "src"
TIMEOUT_S = 300


def need(*modules: str) -> None:
    """Skip the calling module cleanly (with the reason) when a framework is not installed."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # missing, or installed but broken (e.g. against another torch)
            pytest.skip(
                f"{name} cannot be imported ({exc}); `make test` installs the framework test "
                "dependencies: pip install -e '.[dev,frameworks]' -c constraints.txt",
                allow_module_level=True,
            )


@dataclass
class Run:
    report: dict[str, Any]
    stdout: str
    stderr: str

    @property
    def codes(self) -> list[str]:
        return sorted(f["code"] for f in self.report["findings"])

    def finding(self, code: str) -> dict[str, Any]:
        (found,) = [f for f in self.report["findings"] if f["code"] == code]
        return found


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONWARNINGS": "ignore",
            "CUDA_VISIBLE_DEVICES": "",
        }
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH", "")) if p)
    return env


class Pending:
    """A framework run, started when its result is first asked for.

    Runs are not overlapped on purpose: TD102's evidence is a share of step time, and several
    framework processes competing for two cores would stretch the compute it is compared with.
    """

    def __init__(self, cmd: list[str], cwd: Path, report: Path, returncode: int = 0) -> None:
        self.cmd, self.cwd, self.report, self.returncode = cmd, cwd, report, returncode
        self.proc: subprocess.Popen | None = None
        self._run: Run | None = None

    def start(self) -> Pending:
        if self.proc is None:
            self.proc = subprocess.Popen(
                self.cmd, cwd=self.cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        return self

    def close(self) -> None:
        """Stop the run if nobody waited for it (a failed test)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()

    def result(self) -> Run:
        if self._run is None:
            self.start()
            assert self.proc is not None
            try:
                out, err = self.proc.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, err = self.proc.communicate()
            assert self.proc.returncode == self.returncode, (
                f"{self.cmd} failed ({self.proc.returncode}):\n{out[-3000:]}\n{err[-6000:]}"
            )
            self._run = Run(json.loads(self.report.read_text()), out, err)
        return self._run


def under_run(script: str, args: list[str], tmp: Path) -> Pending:
    """Start ``traindoctor run --output-format json -o report.json SCRIPT ARGS --out tmp``."""
    report = tmp / "run-report.json"
    return Pending(
        [
            sys.executable,
            "-m",
            "traindoctor",
            "run",
            "--output-format",
            "json",
            "-o",
            str(report),
            str(SCRIPTS / script),
            *args,
            "--out",
            str(tmp),
        ],
        tmp,
        report,
    )


def with_callback(script: str, args: list[str], tmp: Path, returncode: int = 0) -> Pending:
    """Start ``python SCRIPT --callback --report report.json ARGS --out tmp`` (no ``traindoctor run``)."""
    report = tmp / "callback-report.json"
    return Pending(
        [sys.executable, str(SCRIPTS / script), "--callback", "--report", str(report), *args, "--out", str(tmp)],
        tmp,
        report,
        returncode,
    )


def line_of(script: str, marker: str) -> int:
    """1-based line of the first line of ``scripts/SCRIPT`` containing ``marker``."""
    lines = (SCRIPTS / script).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if marker in line)
