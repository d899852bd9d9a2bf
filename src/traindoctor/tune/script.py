"""``traindoctor tune SCRIPT``: tune the whole training loop by running the script in trials.

Every trial is a child process (:mod:`traindoctor.tune._trial`) that runs the user's script under
the doctor, in a fresh view of the user's working directory inside a sandbox
(:mod:`traindoctor.sandbox`: what it writes lands in the trial's scratch folder or fails, and never
changes the user's files), and stops it after a bounded number of steady steps. The search:

1. **probe** (one child): the script's own configuration (the *baseline*), then the two bounds of
   the pipeline in the same process: the training loader *alone* for each worker count (how fast
   batches can be produced), and the loop *alone* on batches replayed from memory for each
   intra-op thread count (how fast they can be consumed);
2. **search**: the pipeline model (:meth:`~traindoctor.facts.data.pipeline.Bounds.predict`)
   ranks every (workers, threads) pair from the bounds; only the pairs predicted within :data:`SEARCH_SHARE` of the best are run end to end,
   best first, while the budget allows;
3. **confirm**: the two fastest configurations and the baseline run again, interleaved, in
   rounds; each configuration's result is the median of its runs.

The physical limit is ``min(fastest loader alone, fastest compute alone)``: no configuration of
these knobs can beat it; the report gives the share of it the best configuration reaches.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import traindoctor
from traindoctor.facts.data.pipeline import MEASURED_GAIN, MEASURED_TIE, Bounds, equally_fast
from traindoctor.machine import usable_cores
from traindoctor.sandbox import SandboxUnavailable, build, choose
from traindoctor.tune.measure import LOADER_KEYS, worker_counts

#: Configurations predicted within this share of the best prediction are measured.
SEARCH_SHARE = 0.85
MAX_SEARCH = 6
MAX_CONFIRM_ROUNDS = 2
DATA_BOUND_SHARE = 0.5


class TuneScriptError(Exception):
    """The script could not be tuned (it failed, never stepped, ...); the message says why."""


@dataclass
class Trial:
    config: dict[str, Any]
    phase: str
    samples_per_s: float | None
    data_wait_share: float | None
    verdict: str
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": dict(self.config),
            "phase": self.phase,
            "samples_per_s": None if self.samples_per_s is None else round(self.samples_per_s, 3),
            "data_wait_share": None if self.data_wait_share is None else round(self.data_wait_share, 4),
            "verdict": self.verdict,
        }


@dataclass
class TuneSettings:
    """How long ``tune SCRIPT`` may take and what it keeps (``--budget``, ``--keep``); not the
    ``[tool.traindoctor]`` settings of :class:`traindoctor.config.Settings`."""

    budget: float = 60.0
    #: Seconds of steady steps per measurement (default: from the budget).
    seconds: float | None = None
    max_steps: int = 200
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


def config_key(config: dict[str, Any]) -> tuple[Any, ...]:
    return tuple((k, config.get(k)) for k in (*LOADER_KEYS, "torch_threads"))


def label(config: dict[str, Any]) -> str:
    parts = [f"num_workers={config.get('num_workers', 0)}"]
    if config.get("num_workers"):
        parts.append(f"prefetch_factor={config.get('prefetch_factor') or 2}")
        if not config.get("persistent_workers"):
            parts.append("persistent_workers=False")
    if config.get("pin_memory"):
        parts.append("pin_memory=True")
    if config.get("torch_threads") is not None:
        parts.append(f"torch_threads={config['torch_threads']}")
    return ", ".join(parts)


def loader_kwargs_of(config: dict[str, Any]) -> dict[str, Any]:
    """The DataLoader keyword arguments of a configuration (what ``loader_kwargs`` reads)."""
    workers = int(config.get("num_workers", 0))
    out: dict[str, Any] = {
        "num_workers": workers,
        "persistent_workers": bool(config.get("persistent_workers")) and workers > 0,
    }
    if workers > 0:
        out["prefetch_factor"] = int(config.get("prefetch_factor") or 2)
    if "pin_memory" in config:
        out["pin_memory"] = bool(config["pin_memory"])
    return out


def verdict_of(config: dict[str, Any], share: float | None) -> str:
    if share is None:
        return "unknown"
    if share >= DATA_BOUND_SHARE:
        workers = int(config.get("num_workers", 0))
        where = "main process" if workers == 0 else f"{workers} worker{'s' if workers != 1 else ''}"
        return f"data-bound ({where})"
    return "compute-bound"


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
        self.sandbox = choose([str(scratch)], settings.sandbox, allow_writes=settings.allow_writes)
        self.count = 0
        self.durations: list[float] = []
        self.use_zygote = hasattr(os, "fork") if use_zygote is None else use_zygote
        self._zygote: subprocess.Popen[str] | None = None

    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.count += 1
        folder = self.scratch / f"trial-{self.count:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        cwd = os.getcwd()
        view = build(cwd, str(folder / "view"), skip=(str(self.scratch),))
        spec = dict(
            spec,
            project=view.project,
            view=view.root,
            out=str(folder / "result.json"),
            seconds=self.settings.measure_s(),
            max_steps=self.settings.max_steps,
        )
        (folder / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
        log = folder / "output.log"
        timeout = self.settings.timeout or max(60.0, 2 * self.settings.budget)
        argv = [str(folder / "spec.json"), view.to_view(self.script), *view.redirect_args(self.args, cwd)]
        start = time.perf_counter()
        if self.use_zygote:
            code = self._run_forked(argv, log, timeout, view.root)
        else:
            code = self._run_fresh(argv, log, timeout, view.root)
        self.durations.append(time.perf_counter() - start)
        result_path = folder / "result.json"
        if not result_path.exists():
            raise TuneScriptError(
                f"the trial process died (exit status {code}); last lines of its output:\n{_tail(log)}"
            )
        result: dict[str, Any] = json.loads(result_path.read_text(encoding="utf-8"))
        result["log"] = str(log)
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


# ---------------------------------------------------------------- the search
@dataclass
class Tuned:
    """Everything ``tune SCRIPT`` found; ``to_dict()`` is the JSON output."""

    script: str
    args: list[str]
    cores: int
    budget: float
    #: The trials' sandbox (:data:`traindoctor.sandbox.LANDLOCK`, ``BUBBLEWRAP`` or ``NONE``).
    sandbox: str = ""
    trials: list[Trial] = field(default_factory=list)
    baseline: dict[str, Any] = field(default_factory=dict)
    best: dict[str, Any] = field(default_factory=dict)
    recommended: dict[str, Any] = field(default_factory=dict)
    speedup: float | None = None
    limit: dict[str, Any] | None = None
    bottleneck_before: str = "unknown"
    bottleneck_after: str = "unknown"
    training_loader: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "traindoctor_tune": 1,
            "mode": "script",
            "script": self.script,
            "args": list(self.args),
            "cores": self.cores,
            "budget_s": self.budget,
            "elapsed_s": round(self.elapsed_s, 3),
            "sandbox": self.sandbox,
            "training_loader": self.training_loader,
            "baseline": self.baseline,
            "recommended": dict(self.recommended),
            "best": self.best,
            "speedup": None if self.speedup is None else round(self.speedup, 3),
            "limit": self.limit,
            "bottleneck_before": self.bottleneck_before,
            "bottleneck_after": self.bottleneck_after,
            "trials": [t.to_dict() for t in self.trials],
            "notes": list(self.notes),
        }

    def tuned_file(self) -> dict[str, Any]:
        """The document ``loader_kwargs(dataset, tuned=PATH)`` reads (DataLoader options only
        under ``recommended``; the thread count beside it)."""
        loader = {k: v for k, v in self.recommended.items() if k != "torch_threads"}
        out: dict[str, Any] = {"traindoctor_tune": 1, "recommended": loader, "script": self.script}
        if "torch_threads" in self.recommended:
            out["torch_threads"] = self.recommended["torch_threads"]
        return out


def _thread_counts(cores: int, script_threads: int | None) -> list[int]:
    counts = {1, cores}
    n = 2
    while n < cores:
        counts.add(n)
        n *= 2
    if script_threads:
        counts.add(min(script_threads, max(cores, 1) * 2))
    return sorted(counts)


def tune_script(
    script: str,
    args: list[str] | None = None,
    *,
    settings: TuneSettings | None = None,
    progress: Any = None,
    scratch: str | None = None,
) -> Tuned:
    """Tune ``script`` (see the module docstring); raises :class:`TuneScriptError`."""
    settings = settings or TuneSettings()
    args = list(args or [])
    if not os.path.isfile(script):
        raise TuneScriptError(f"can't open file {os.path.abspath(script)!r}: no such file")
    root = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix="traindoctor-tune-"))
    start = time.perf_counter()
    try:
        tuned = _tune(script, args, settings, progress, root, start)
        if settings.keep and not scratch:
            tuned.notes.append(f"trial files kept in {root}")
        return tuned
    finally:
        if not (settings.keep or scratch):
            shutil.rmtree(root, ignore_errors=True)


def _tune(script: str, args: list[str], settings: TuneSettings, progress: Any, root: Path, start: float) -> Tuned:
    try:
        runner = Runner(script, args, settings, root)
    except SandboxUnavailable as exc:
        raise TuneScriptError(str(exc)) from None
    try:
        return _search(runner, script, args, settings, progress, start)
    finally:
        runner.close()


def _search(runner: Runner, script: str, args: list[str], settings: TuneSettings, progress: Any, start: float) -> Tuned:
    cores = usable_cores()
    tick = progress or _NoProgress()
    result = Tuned(script=script, args=args, cores=cores, budget=settings.budget, sandbox=runner.sandbox.kind)

    # 1. the probe: baseline and both bounds
    tick.remaining(4)
    tick.start("baseline and bounds (loader alone, compute alone)")
    probe = runner.run(
        {
            "mode": "probe",
            "loader_workers": worker_counts(min(2 * cores, 16)),
            "threads": _thread_counts(cores, None),
        }
    )
    result.notes.extend(probe.get("notes", []))
    segments = probe.get("segments", [])
    base_seg = next((s for s in segments if s["phase"] == "baseline"), None)
    training = probe.get("training_loader")
    if base_seg is None or training is None:
        why = "; ".join(probe.get("notes", [])) or "no training step was measured"
        steps = probe.get("steps_seen", 0)
        raise TuneScriptError(
            f"could not measure the script's training loop ({why}; {steps} optimizer step"
            f"{'s' if steps != 1 else ''} seen). The script must train with a DataLoader and an "
            "optimizer for a few dozen steps."
        )
    result.training_loader = {
        "site": training.get("site"),
        "batch_size": training.get("batch_size"),
        "config": training.get("config"),
    }
    script_threads = int(training["config"].get("torch_threads") or probe.get("script_threads") or 1)
    own = dict(training["config"], torch_threads=script_threads)
    base_share = base_seg.get("data_wait_share")
    result.trials.append(Trial(own, "baseline", base_seg.get("samples_per_s"), base_share, verdict_of(own, base_share)))
    loader_rates: dict[int, float] = {}
    compute_rates: dict[int, float] = {}
    compute_cpu: dict[int, float] = {}
    loader_cpu = None
    receive_cpu: dict[int, float] = {}
    for seg in segments:
        rate = seg.get("samples_per_s")
        if seg["phase"] == "bound-loader":
            w = int(seg["config"]["num_workers"])
            cfg = dict(loader_kwargs_of(seg["config"]), torch_threads=script_threads)
            result.trials.append(Trial(cfg, "bound-loader", rate, None, "loader alone"))
            if rate:
                loader_rates[w] = rate
                if w == 0:
                    loader_cpu = seg.get("cpu_s_per_sample")
                elif seg.get("cpu_s_per_sample") is not None:
                    receive_cpu[w] = seg["cpu_s_per_sample"]
        elif seg["phase"] == "bound-compute":
            t = int(seg["config"]["torch_threads"])
            cfg = dict(seg["config"])
            result.trials.append(
                Trial(cfg, "bound-compute", rate, seg.get("data_wait_share"), "compute alone (cached batches)")
            )
            if rate:
                compute_rates[t] = rate
                if seg.get("cpu_s_per_sample") is not None:
                    compute_cpu[t] = seg["cpu_s_per_sample"]
    tick.done(f"baseline {_rate(base_seg.get('samples_per_s'))}")
    bounds = Bounds(loader_rates, compute_rates, loader_cpu, compute_cpu, cores, receive_cpu)
    result.limit = bounds.limit()
    # pin_memory only matters for host-to-GPU copies: tried (with workers) only when the run
    # used CUDA; on CPU it is never set
    pin = bool(own.get("pin_memory")) or bool(probe.get("uses_cuda"))

    # 2. search: only what the bounds say can win
    predictions: list[tuple[float, dict[str, Any]]] = []
    for w in sorted(loader_rates):
        for t in sorted(compute_rates):
            rate = bounds.predict(w, t)
            if rate is None:
                continue
            cfg = {"num_workers": w}
            if w > 0:
                cfg.update(persistent_workers=True, prefetch_factor=2)
            if pin and w > 0:
                cfg["pin_memory"] = True
            cfg["torch_threads"] = t
            predictions.append((rate, cfg))
    if not predictions:
        raise TuneScriptError("the bounds could not be measured (see the notes): " + "; ".join(result.notes))
    top = max(r for r, _ in predictions)
    # best prediction first; among equals, fewer workers, then the script's own thread count
    predictions.sort(
        key=lambda rc: (-round(rc[0] / top, 2), rc[1]["num_workers"], rc[1]["torch_threads"] != script_threads)
    )
    queue = [cfg for rate, cfg in predictions if rate >= top * SEARCH_SHARE][:MAX_SEARCH]
    # The best configuration without workers is always measured, right after the best
    # prediction: the bounds are single short measurements, possibly on a busy machine, and
    # workers must beat the simplest setting in the loop, not only in the model.
    plain = next((cfg for _, cfg in predictions if cfg["num_workers"] == 0), None)
    if plain is not None and queue and queue[0] is not plain:
        if plain in queue:
            queue.remove(plain)
        queue.insert(1, plain)
    plain_key = config_key(plain) if plain is not None else None
    measured: dict[tuple[Any, ...], list[Trial]] = {config_key(own): [result.trials[0]]}
    configs: dict[tuple[Any, ...], dict[str, Any]] = {config_key(own): own}
    search_until = start + settings.budget * 0.7
    tried_prefetch = False
    while queue:
        cfg = queue.pop(0)
        key = config_key(cfg)
        if key in measured:
            continue
        searched = len(measured) - 1
        pending_plain = plain_key is not None and plain_key not in measured
        if searched >= 1 and not pending_plain and time.perf_counter() + runner.typical_s() > search_until:
            result.notes.append(f"budget: {len(queue) + 1} predicted configuration(s) not measured")
            break
        tick.remaining(len(queue) + 2)
        trial = _run_trial(runner, tick, cfg, "search", training)
        measured[key] = [trial]
        configs[key] = cfg
        result.trials.append(trial)
        # a larger prefetch factor smooths uneven steps: try it once, on the first configuration
        # with workers that still waits for data
        if (
            not tried_prefetch
            and cfg["num_workers"] > 0
            and trial.data_wait_share is not None
            and trial.data_wait_share > 0.1
        ):
            tried_prefetch = True
            queue.insert(0, dict(cfg, prefetch_factor=4))

    # 3. confirm: the two fastest and the baseline, interleaved, repeated
    def median_rate(key: tuple[Any, ...]) -> float:
        rates = [t.samples_per_s for t in measured[key] if t.samples_per_s]
        return statistics.median(rates) if rates else 0.0

    ranked = sorted((k for k in measured if k != config_key(own)), key=median_rate, reverse=True)
    # the runner-up is confirmed too when one run cannot tell it from the best
    close = [k for k in ranked[1:2] if median_rate(k) >= median_rate(ranked[0]) * 0.9]
    finalists = ranked[:1] + close + [config_key(own)]
    rounds = 0
    while rounds < MAX_CONFIRM_ROUNDS:
        need = len(finalists) * runner.typical_s()
        if time.perf_counter() + need > start + settings.budget:
            break
        order = finalists[rounds % len(finalists) :] + finalists[: rounds % len(finalists)]
        tick.remaining(len(order))
        for key in order:
            trial = _run_trial(runner, tick, configs[key], "confirm", training)
            measured[key].append(trial)
            result.trials.append(trial)
        rounds += 1
    if rounds == 0:
        result.notes.append("budget: no confirmation rounds (raise --budget for repeated runs)")

    # 4. the choice
    equal = equally_fast(((k, median_rate(k)) for k in measured), MEASURED_TIE)
    best_key = min(
        equal, key=lambda k: (configs[k]["num_workers"], configs[k]["torch_threads"] != script_threads, -median_rate(k))
    )
    # Workers cost processes, memory and start-up: they must win by a clear margin.
    no_workers = [k for k in measured if configs[k]["num_workers"] == 0 and median_rate(k) > 0]
    if configs[best_key]["num_workers"] > 0 and no_workers:
        plain_best = max(no_workers, key=median_rate)
        if median_rate(plain_best) * MEASURED_GAIN >= median_rate(best_key):
            best_key = plain_best
    best_cfg = configs[best_key]
    best_rate = median_rate(best_key)
    base_rate = median_rate(config_key(own))
    shares = [t.data_wait_share for t in measured[best_key] if t.data_wait_share is not None]
    best_share = statistics.median(shares) if shares else None
    base_shares = [t.data_wait_share for t in measured[config_key(own)] if t.data_wait_share is not None]
    base_share_med = statistics.median(base_shares) if base_shares else None
    result.baseline = {
        "config": own,
        "settings": loader_kwargs_of(own),
        "torch_threads": script_threads,
        "samples_per_s": round(base_rate, 3),
        "runs": len(measured[config_key(own)]),
        "data_wait_share": _round(base_share_med),
    }
    result.best = {
        "config": best_cfg,
        "samples_per_s": round(best_rate, 3),
        "runs": len(measured[best_key]),
        "data_wait_share": _round(best_share),
    }
    if result.limit and result.limit["samples_per_s"]:
        result.limit["reached"] = round(best_rate / result.limit["samples_per_s"], 3)
    result.speedup = best_rate / base_rate if base_rate > 0 else None
    recommended = loader_kwargs_of(best_cfg)
    if best_cfg["torch_threads"] != script_threads:
        recommended["torch_threads"] = best_cfg["torch_threads"]
    result.recommended = recommended
    result.bottleneck_before = verdict_of(own, base_share_med)
    result.bottleneck_after = verdict_of(best_cfg, best_share)
    result.elapsed_s = time.perf_counter() - start
    tick.close()
    return result


def _run_trial(runner: Runner, tick: Any, cfg: dict[str, Any], phase: str, training: dict[str, Any]) -> Trial:
    tick.start(f"{phase} {label(cfg)}")
    out = runner.run({"mode": "trial", "config": cfg, "site": training.get("site")})
    seg = next((s for s in out.get("segments", []) if s["phase"] == "search"), None)
    if seg is None:
        why = out.get("error") or "; ".join(out.get("notes", [])) or "the script ended too soon"
        trial = Trial(cfg, phase, None, None, f"failed: {why}")
    else:
        share = seg.get("data_wait_share")
        trial = Trial(cfg, phase, seg.get("samples_per_s"), share, verdict_of(cfg, share))
    tick.done(_rate(trial.samples_per_s) if trial.samples_per_s else trial.verdict)
    return trial


def _rate(value: float | None) -> str:
    return "-" if not value else f"{value:.1f} samples/s"


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


class _NoProgress:
    def remaining(self, units: int) -> None: ...
    def start(self, label: str) -> None: ...
    def done(self, result: str = "") -> None: ...
    def close(self) -> None: ...
