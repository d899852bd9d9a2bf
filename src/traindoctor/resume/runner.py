"""Run the user's script three times in child processes and collect what the recorders saw.

1. *interrupted*: runs until the first ``torch.save`` at or after step K has returned, then is
   killed with a hard exit at its next optimizer step (like a preemption); this fixes the
   checkpoint step k.
2. *resumed* (same working directory, so it finds the checkpoint): the script with the resume
   arguments, stopped when the global step count reaches N.
3. *reference*: uninterrupted, N steps, in its own working directory.

Runs 2 and 3 are independent and run at the same time. A file or folder that a resume argument
names and that exists before the runs (a ``ckpt/last.pt`` left by an earlier training) is left
out of both views: the resumed run can read only what the interrupted run wrote there, never a
stale checkpoint, and the verdict says so (:func:`stale_notes`). They run where the user runs the script,
yet cannot change the user's files: each scenario's working directory is a view of the caller's
(:mod:`traindoctor.sandbox.view`: the user's files are readable at the same relative paths, so
``configurator.py`` and ``data/`` are found; runs 1 and 2 share one view, run 3 has its own), and
every run is a process of the sandbox (:mod:`traindoctor.sandbox`: what it writes lands in the
view or fails). Arguments that name existing files are redirected into the view (never to the
user's file itself); those outside the caller's folder are made absolute.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import traindoctor
from traindoctor.sandbox import PARENT_LEVELS, Sandbox, View, build, detect


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


def _env(name: str) -> dict[str, str]:
    env = dict(os.environ)
    package_root = str(Path(traindoctor.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env.setdefault("PYTHONHASHSEED", "0")
    env["TRAINDOCTOR_VERIFY_RESUME"] = name
    return env


class Scenario:
    """One child process in ``sandbox``, started in the view ``view``: start, wait, read its record.

    ``script`` and ``args`` are the caller's (relative to the folder ``view`` mirrors); the child
    gets them redirected into the view."""

    def __init__(
        self,
        name: str,
        mode: str,
        script: str,
        args: list[str],
        view: View,
        target: int,
        *,
        sandbox: Sandbox,
        offset: int = 0,
        interrupt_at: int | None = None,
        detail_step: int | None = None,
        nproc: int = 1,
    ) -> None:
        self.name = name
        self.nproc = nproc
        self.sandbox = sandbox
        cwd = Path(view.root)
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
        cmd += [view.to_view(os.path.abspath(script)), "--", *view.redirect_args(args, view.project)]
        self.cmd = sandbox.command(cmd, str(cwd))
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Scenario:
        self.cwd.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                self.cmd,
                cwd=self.cwd,
                env=self.sandbox.env(_env(self.name)),
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
    #: The runs' sandbox (:data:`traindoctor.sandbox.LANDLOCK`, ``BUBBLEWRAP`` or ``NONE``).
    sandbox: str = ""
    #: Resume arguments that named an existing path before the runs: (argument, whether the
    #: interrupted run wrote it; None for a path outside the folder, which the runs read as is).
    stale: list[tuple[str, bool | None]] = field(default_factory=list)
    #: ``--noise-floor``: a second uninterrupted run, in a view of its own.
    reference2: RunResult | None = None


def existing_paths(args: list[str], caller: str) -> list[tuple[str, str | None]]:
    """(argument, its path inside ``caller`` or None outside it) for each argument, or the
    value of an ``--opt=VALUE``, that names a file or folder existing now."""
    out: list[tuple[str, str | None]] = []
    for arg in args:
        value = arg.partition("=")[2] if arg.startswith("-") else arg
        if not value or value.startswith("-") or not os.path.lexists(os.path.join(caller, value)):
            continue
        full = os.path.realpath(os.path.join(caller, value))
        root = os.path.realpath(caller)
        out.append((value, full if full.startswith(root + os.sep) else None))
    return out


def stale_notes(runs: Runs) -> list[str]:
    """What the verdict says about resume arguments that named a path existing before the runs."""
    notes = []
    for arg, written in runs.stale:
        if written is None:
            notes.append(
                f"{arg} (in --resume-args) existed before the runs and lies outside this folder: the resumed "
                "run read that file as it was, not what the interrupted run wrote"
            )
        elif written:
            notes.append(
                f"{arg} (in --resume-args) existed before the runs; they did not see it: the resumed run "
                "read the checkpoint the interrupted run wrote there"
            )
        else:
            notes.append(
                f"{arg} (in --resume-args) existed before the runs, but the interrupted run did not write it: "
                "it is a file left by an earlier run, and the resumed run did not see it; point "
                "--resume-args at the path the script saves to"
            )
    return notes


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
    sandbox: str = "auto",
    allow_writes: bool = False,
    second_reference: bool = False,
) -> Runs:
    """Run the three scenarios; ``resumed`` is None when no checkpoint was written.

    ``progress`` (a :class:`traindoctor.tune.progress.Progress`) gets one tick per run. The runs'
    sandbox is ``sandbox`` (:func:`traindoctor.sandbox.detect`; raises
    :class:`~traindoctor.sandbox.SandboxUnavailable` when none works and writes were not allowed).
    ``second_reference``: also run the script uninterrupted a second time (beside the resumed and
    reference runs), whose differences from the first are the noise floor of its kernels."""
    tick = progress if progress is not None else _Quiet()
    caller = os.getcwd()
    extra = shlex.split(resume_args)
    kind = detect(sandbox, allow_writes=allow_writes)  # before any folder is made
    root = Path(workdir or tempfile.mkdtemp(prefix="traindoctor-resume-"))
    root.mkdir(parents=True, exist_ok=True)
    box = Sandbox(kind, (os.path.realpath(root),))
    named = existing_paths(extra, caller)
    left_out = (str(root), *(path for _, path in named if path is not None))
    resume_view = build(caller, str(root / "resume-cwd"), skip=left_out, parents=PARENT_LEVELS)
    reference_view = build(caller, str(root / "reference-cwd"), skip=left_out, parents=PARENT_LEVELS)
    second_view = (
        build(caller, str(root / "reference2-cwd"), skip=left_out, parents=PARENT_LEVELS) if second_reference else None
    )
    tick.start(f"interrupted run (checkpoint at or after step {interrupt_at})")
    interrupted = (
        Scenario(
            "interrupted",
            "interrupt",
            script,
            args,
            resume_view,
            steps,
            sandbox=box,
            interrupt_at=interrupt_at,
            nproc=nproc,
        )
        .start()
        .wait(timeout)
    )
    k = (interrupted.record or {}).get("checkpoint_step")
    tick.done("no checkpoint" if k is None else f"checkpoint at step {k}")
    stale = [(arg, None if path is None else os.path.lexists(resume_view.to_view(path))) for arg, path in named]
    if k is None:
        tick.remaining(1)
        tick.start("reference run")
        reference = (
            Scenario("reference", "reference", script, args, reference_view, steps, sandbox=box, nproc=nproc)
            .start()
            .wait(timeout)
        )
        tick.done()
        return Runs(reference, interrupted, None, root, box.kind, stale)
    tick.start("resumed and reference runs")
    resumed = Scenario(
        "resumed",
        "resume",
        script,
        args + extra,
        resume_view,
        steps,
        sandbox=box,
        offset=int(k),
        detail_step=int(k) + 1,
        nproc=nproc,
    ).start()
    reference_run = Scenario(
        "reference",
        "reference",
        script,
        args,
        reference_view,
        steps,
        sandbox=box,
        detail_step=int(k) + 1,
        nproc=nproc,
    ).start()
    second = None
    if second_view is not None:
        second = Scenario(
            "reference2",
            "reference",
            script,
            args,
            second_view,
            steps,
            sandbox=box,
            detail_step=int(k) + 1,
            nproc=nproc,
        ).start()
    resumed_result = resumed.wait(timeout)
    tick.done("resumed run")
    tick.label = "reference run"
    reference_result = reference_run.wait(timeout)
    second_result = second.wait(timeout) if second is not None else None
    tick.done()
    return Runs(reference_result, interrupted, resumed_result, root, box.kind, stale, second_result)


class _Quiet:
    label = ""

    def start(self, label: str) -> None: ...
    def done(self, result: str = "") -> None: ...
    def remaining(self, units: int) -> None: ...
