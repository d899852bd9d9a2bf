"""The trial processes of ``traindoctor tune SCRIPT``: started one at a time, each in its sandboxed view.

:class:`Runner` starts :mod:`traindoctor.tune._trial` children (forked from a zygote that imported
torch once, :mod:`traindoctor.tune._zygote`, where ``os.fork`` exists), keeps their logs in the
scratch folder and records the machine's load average before and after each one
(:func:`traindoctor.machine.load_average`) and the cores other programs kept busy while it ran
(:func:`traindoctor.machine.others_cores`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import traindoctor
from traindoctor.machine import cpu_snapshot, load_average, others_cores
from traindoctor.sandbox import PARENT_LEVELS, build
from traindoctor.sandbox import choose as choose_sandbox


class TuneScriptError(Exception):
    """The script could not be tuned (it failed, never stepped, ...); the message says why."""


@dataclass
class TuneSettings:
    """How long ``tune SCRIPT`` may take and what it keeps (``--budget``, ``--keep``); not the
    ``[tool.traindoctor]`` settings of :class:`traindoctor.config.Settings`."""

    budget: float = 60.0
    #: Seconds of steady steps per measurement (default: from the budget).
    seconds: float | None = None
    max_steps: int = 200
    #: Confirmation rounds run even past the budget, for the two finalists that decide the
    #: advice while their runs are undecided (with the search's run, 3 runs each: enough to
    #: tell them apart).
    min_rounds: int = 2
    timeout: float | None = None
    keep: bool = False
    #: The trials' sandbox (:data:`traindoctor.sandbox.KINDS`), and whether to run without one
    #: where none works (``--allow-writes``).
    sandbox: str = "auto"
    allow_writes: bool = False

    def measure_s(self) -> float:
        """Seconds of steady steps each measurement runs for."""
        if self.seconds is not None:
            return self.seconds
        return min(max(self.budget / 40.0, 0.25), 3.0)


# ---------------------------------------------------------------- child processes
def _env() -> dict[str, str]:
    env = dict(os.environ)
    package_root = str(Path(traindoctor.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    env["TRAINDOCTOR_TUNE_TRIAL"] = "1"
    return env


class Runner:
    """Starts trial children, one at a time, and keeps their logs in the scratch folder.

    Each trial runs in its own view of the current folder (``trial-NN/view``), inside the sandbox
    of ``settings`` writable beneath ``scratch`` (:class:`SandboxUnavailable` when none works and
    writes were not allowed). Where ``os.fork`` exists, trials are forked from a zygote that
    imported torch once (:mod:`traindoctor.tune._zygote`), started inside the sandbox; otherwise
    each trial is a fresh interpreter.
    """

    def __init__(
        self, script: str, args: list[str], settings: TuneSettings, scratch: Path, use_zygote: bool | None = None
    ) -> None:
        self.script = os.path.abspath(script)
        self.args = list(args)
        self.settings = settings
        self.scratch = scratch
        self.sandbox = choose_sandbox([str(scratch)], settings.sandbox, allow_writes=settings.allow_writes)
        self.count = 0
        self.durations: list[float] = []
        self.use_zygote = hasattr(os, "fork") if use_zygote is None else use_zygote
        self._zygote: subprocess.Popen[str] | None = None

    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.count += 1
        folder = self.scratch / f"trial-{self.count:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        cwd = os.getcwd()
        view = build(cwd, str(folder / "view"), skip=(str(self.scratch),), parents=PARENT_LEVELS)
        spec = dict(
            {"max_steps": self.settings.max_steps},
            **spec,
            project=view.project,
            view=view.root,
            out=str(folder / "result.json"),
            seconds=self.settings.measure_s(),
        )
        (folder / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        log = folder / "output.log"
        timeout = self.settings.timeout or max(60.0, 2 * self.settings.budget)
        argv = [str(folder / "spec.json"), view.to_view(self.script), *view.redirect_args(self.args, cwd)]
        start = time.perf_counter()
        load_before = load_average()
        cpu_before = cpu_snapshot()
        if self.use_zygote:
            code = self._run_forked(argv, log, timeout, view.root)
        else:
            code = self._run_fresh(argv, log, timeout, view.root)
        self.durations.append(time.perf_counter() - start)
        others = others_cores(cpu_before, cpu_snapshot())
        result_path = folder / "result.json"
        if not result_path.exists():
            raise TuneScriptError(
                f"the trial process died (exit status {code}); last lines of its output:\n{_tail(log)}"
            )
        result: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
        result["log"] = str(log)
        result["load"] = [load_before, load_average()]
        result["others"] = None if others is None else round(others, 3)
        if result.get("status") == "failed" and not result.get("segments"):
            raise TuneScriptError(f"the script failed: {result.get('error')}; last lines of its output:\n{_tail(log)}")
        return result

    def _timed_out(self, timeout: float, log: Path) -> TuneScriptError:
        return TuneScriptError(
            f"a trial ran longer than {timeout:g} s; the script must reach its training steps "
            f"sooner; last lines of its output:\n{_tail(log)}"
        )

    def _run_fresh(self, argv: list[str], log: Path, timeout: float, cwd: str) -> int | None:
        cmd = self.sandbox.command([sys.executable, "-m", "traindoctor.tune._trial", *argv], cwd)
        with open(log, "wb") as fh:
            proc = subprocess.Popen(
                cmd,
                cwd=cwd,
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.sandbox.env(_env()),
            )
            try:
                return proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise self._timed_out(timeout, log) from None

    def _start_zygote(self) -> subprocess.Popen[str]:
        if self._zygote is None or self._zygote.poll() is not None:
            self._zygote = subprocess.Popen(
                self.sandbox.command([sys.executable, "-m", "traindoctor.tune._zygote"], str(self.scratch)),
                cwd=self.scratch,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=self.sandbox.env(_env()),
                text=True,
                bufsize=1,
            )
            ready = self._read(self._zygote, 120.0)
            if not ready or not ready.get("ready"):
                self.close()
                raise TuneScriptError("could not start the trial process server (is torch installed?)")
        return self._zygote

    @staticmethod
    def _read(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any] | None:
        import select

        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], max(timeout, 0.0))
        if not ready:
            return None
        line = proc.stdout.readline()
        return json.loads(line) if line.strip() else None

    def _run_forked(self, argv: list[str], log: Path, timeout: float, cwd: str) -> int | None:
        zygote = self._start_zygote()
        assert zygote.stdin is not None
        request = {"argv": argv, "log": str(log), "cwd": cwd}
        zygote.stdin.write(json.dumps(request) + "\n")
        zygote.stdin.flush()
        started = self._read(zygote, 30.0)
        if not started or "pid" not in started:
            self.close()
            raise TuneScriptError("the trial process server stopped answering")
        ended = self._read(zygote, timeout)
        if ended is None:
            try:
                os.kill(int(started["pid"]), 9)
            except OSError:
                pass
            self._read(zygote, 10.0)
            raise self._timed_out(timeout, log)
        return ended.get("status")

    def close(self) -> None:
        zygote, self._zygote = self._zygote, None
        if zygote is None:
            return
        try:
            if zygote.stdin is not None:
                zygote.stdin.close()
            zygote.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            zygote.kill()
            zygote.wait()
        if zygote.stdout is not None:
            zygote.stdout.close()

    def typical_s(self) -> float:
        trials = self.durations[1:] or self.durations
        return statistics.median(trials) if trials else 0.0


def _tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(f"    {line}" for line in text[-lines:])
