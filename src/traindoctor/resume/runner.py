"""Run the user's script three times in child processes and collect what the recorders saw.

1. *interrupted*: runs until the first ``torch.save`` at or after step K has returned, then is
   killed with a hard exit at its next optimizer step (like a preemption); this fixes the
   checkpoint step k.
2. *resumed* (same working directory, so it finds the checkpoint): the script with the resume
   arguments, stopped when the global step count reaches N.
3. *reference*: uninterrupted, N steps, in its own working directory.

Runs 2 and 3 are independent and run at the same time. They run where the user runs the script:
each scenario's working directory is a mirror of the caller's (see
:mod:`traindoctor.resume.sandbox`: the user's files are readable at the same relative paths, so
``configurator.py`` and ``data/`` are found; what a run writes stays in its own mirror and never
changes the user's files). Arguments that name existing files relative to the caller's directory
are also made absolute.

With ``nproc > 1`` each run is a ``torchrun --standalone --nproc-per-node nproc`` launch; every
rank records into ``<run>-record/rank<r>/`` and the verdict is made per rank.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import traindoctor
from traindoctor.resume.sandbox import mirror


@dataclass
class RunResult:
    name: str
    returncode: int | None
    record: dict[str, Any] | None
    final: Path | None
    log: Path
    timed_out: bool = False
    #: Under torchrun: one result per rank (rank 0's record is also ``record``).
    ranks: list[RunResult] | None = None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


def absolutize(args: list[str], cwd: str) -> list[str]:
    """Make arguments that name existing files in ``cwd`` absolute (also ``--opt=path``)."""
    out = []
    for arg in args:
        head, sep, tail = arg.partition("=") if arg.startswith("-") else ("", "", arg)
        if tail and not os.path.isabs(tail) and not tail.startswith("-") and os.path.exists(os.path.join(cwd, tail)):
            tail = os.path.abspath(os.path.join(cwd, tail))
        out.append(f"{head}{sep}{tail}" if sep else (tail or arg))
    return out


def _env(name: str) -> dict[str, str]:
    env = dict(os.environ)
    package_root = str(Path(traindoctor.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONHASHSEED", "0")
    env["TRAINDOCTOR_VERIFY_RESUME"] = name
    env["TRAINDOCTOR_MIRROR"] = "1"
    return env


class Scenario:
    """One child process: start, wait, read its record."""

    def __init__(
        self,
        name: str,
        mode: str,
        script: str,
        args: list[str],
        cwd: Path,
        target: int,
        *,
        offset: int = 0,
        interrupt_at: int | None = None,
        detail_step: int | None = None,
        nproc: int = 1,
    ) -> None:
        self.name = name
        self.nproc = nproc
        self.out = cwd.parent / f"{name}-record"
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = self.out / "output.log"
        launcher = [sys.executable]
        if nproc > 1:
            launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
        cmd = [
            *launcher,
            "-m",
            "traindoctor.resume._child",
            "--mode",
            mode,
            "--target",
            str(target),
            "--offset",
            str(offset),
            "--out",
            str(self.out),
        ]
        if interrupt_at is not None:
            cmd += ["--interrupt-at", str(interrupt_at)]
        if detail_step is not None:
            cmd += ["--detail-step", str(detail_step)]
        cmd += [script, "--", *args]
        self.cmd = cmd
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Scenario:
        self.cwd.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                self.cmd,
                cwd=self.cwd,
                env=_env(self.name),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return self

    def wait(self, timeout: float) -> RunResult:
        assert self.proc is not None
        timed_out = False
        try:
            code: int | None = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code, timed_out = None, True
        if self.nproc > 1:
            ranks = [self._result(self.out / f"rank{r}", code, timed_out) for r in range(self.nproc)]
            first = ranks[0]
            return RunResult(self.name, code, first.record, first.final, self.log, timed_out, ranks)
        return self._result(self.out, code, timed_out)

    def _result(self, out: Path, code: int | None, timed_out: bool) -> RunResult:
        record = None
        record_path = out / "record.json"
        if record_path.exists():
            record = json.loads(record_path.read_text())
        final = out / "final.pt"
        return RunResult(self.name, code, record, final if final.exists() else None, self.log, timed_out)


@dataclass
class Runs:
    reference: RunResult
    interrupted: RunResult
    resumed: RunResult | None
    workdir: Path


def run_all(
    script: str,
    args: list[str],
    resume_args: str,
    *,
    steps: int,
    interrupt_at: int,
    timeout: float,
    workdir: str | None = None,
    progress: Any = None,
    nproc: int = 1,
) -> Runs:
    """Run the three scenarios; ``resumed`` is None when no checkpoint was written.

    ``progress`` (a :class:`traindoctor.tune.progress.Progress`) gets one tick per run."""
    tick = progress if progress is not None else _Quiet()
    caller = os.getcwd()
    script = os.path.abspath(script)
    args = absolutize(args, caller)
    extra = absolutize(shlex.split(resume_args), caller)
    root = Path(workdir or tempfile.mkdtemp(prefix="traindoctor-resume-"))
    for name in ("resume-cwd", "reference-cwd"):
        mirror(caller, root / name, skip=(str(root),))
    tick.start(f"interrupted run (checkpoint at or after step {interrupt_at})")
    interrupted = (
        Scenario(
            "interrupted", "interrupt", script, args, root / "resume-cwd", steps, interrupt_at=interrupt_at, nproc=nproc
        )
        .start()
        .wait(timeout)
    )
    k = (interrupted.record or {}).get("checkpoint_step")
    tick.done("no checkpoint" if k is None else f"checkpoint at step {k}")
    if k is None:
        tick.remaining(1)
        tick.start("reference run")
        reference = (
            Scenario("reference", "reference", script, args, root / "reference-cwd", steps, nproc=nproc)
            .start()
            .wait(timeout)
        )
        tick.done()
        return Runs(reference, interrupted, None, root)
    tick.start("resumed and reference runs")
    resumed = Scenario(
        "resumed",
        "resume",
        script,
        args + extra,
        root / "resume-cwd",
        steps,
        offset=int(k),
        detail_step=int(k) + 1,
        nproc=nproc,
    ).start()
    reference_run = Scenario(
        "reference", "reference", script, args, root / "reference-cwd", steps, detail_step=int(k) + 1, nproc=nproc
    ).start()
    resumed_result = resumed.wait(timeout)
    tick.done("resumed run")
    tick.label = "reference run"
    reference_result = reference_run.wait(timeout)
    tick.done()
    return Runs(reference_result, interrupted, resumed_result, root)


class _Quiet:
    label = ""

    def start(self, label: str) -> None: ...
    def done(self, result: str = "") -> None: ...
    def remaining(self, units: int) -> None: ...
