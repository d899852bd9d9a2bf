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
3. **confirm**: the finalists (:func:`~traindoctor.tune.decide.choose_finalists`) run again,
   interleaved, in rounds, until their runs are told apart or tied
   (:func:`~traindoctor.tune.repeats.compare`), at most :data:`MAX_CONFIRM_ROUNDS`; each
   configuration's result is the median of its runs, and the simplest finalist the fastest is not
   measured faster than is recommended (:func:`~traindoctor.tune.decide.choose`);
4. **conditions**: the load average before and after every trial and the cores tune got
   (affinity, cgroup quota; :mod:`traindoctor.tune.conditions`); advice measured above half the
   cores' load, or whose finalists swapped places between rounds, says it depends on contention.

The physical limit is ``min(fastest loader alone, fastest compute alone)``, as the probe measured
it; the report gives the share of it the best configuration reaches (never above 100%: a best
measured faster says the bounds were measured under other load).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindoctor.facts.data.pipeline import MEASURED_GAIN, MEASURED_TIE, Bounds, keep_workers
from traindoctor.machine import load_average
from traindoctor.sandbox import SandboxUnavailable
from traindoctor.tune._trial import BASE_WARMUP, MIN_STEPS, steps_needed
from traindoctor.tune.conditions import CONTENDED_SHARE, OTHERS_SHARE, Cores, contended, cores_got
from traindoctor.tune.decide import Choice, choose, choose_finalists, decided, undecided_minor
from traindoctor.tune.measure import LOADER_KEYS, worker_counts
from traindoctor.tune.repeats import TIED, compare, flipped, interval, median
from traindoctor.tune.runner import Runner, TuneScriptError, TuneSettings

#: Configurations predicted within this share of the best prediction are measured.
SEARCH_SHARE = 0.85
MAX_SEARCH = 6
#: The search stops at this share of the budget; the rest is for the confirmation rounds.
SEARCH_BUDGET_SHARE = 0.5
#: Confirmation rounds at most: with the search's run, a finalist has up to 1 + this many runs.
MAX_CONFIRM_ROUNDS = 4
MAX_FINALISTS = 4
#: Progress units, fixed when tune starts: the probe (and a second one for a short script), the
#: search (and one larger prefetch factor), the confirmation rounds.
PROGRESS_UNITS = 2 + MAX_SEARCH + 1 + MAX_CONFIRM_ROUNDS * MAX_FINALISTS
DATA_BOUND_SHARE = 0.5


@dataclass
class Trial:
    config: dict[str, Any]
    phase: str
    samples_per_s: float | None
    data_wait_share: float | None
    verdict: str
    #: The machine's load average before and after the trial's process (None: unknown).
    load: tuple[float | None, float | None] = (None, None)
    #: The cores other programs kept busy during the trial (None: unknown).
    others: float | None = None

    @property
    def peak_load(self) -> float | None:
        known = [x for x in self.load if x is not None]
        return max(known) if known else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "config": dict(self.config),
            "phase": self.phase,
            "samples_per_s": None if self.samples_per_s is None else round(self.samples_per_s, 3),
            "data_wait_share": None if self.data_wait_share is None else round(self.data_wait_share, 4),
            "verdict": self.verdict,
            "load": [None if x is None else round(x, 2) for x in self.load],
            "others": None if self.others is None else round(self.others, 2),
        }

    def contended(self, cores: Cores) -> bool:
        """Whether other programs shared the cores while the trial ran (:func:`contended`)."""
        return contended(self.peak_load, cores, self.others)


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
    #: The cores tune got and the machine's load during the trials (``conditions`` in the JSON).
    conditions: dict[str, Any] = field(default_factory=dict)
    #: The finalists' runs, their range and how each compared with the fastest.
    comparisons: list[dict[str, Any]] = field(default_factory=list)
    #: How the best's runs compare with the baseline's (:mod:`traindoctor.tune.repeats`), and the
    #: speed-up range the runs allow (lowest best over highest baseline, and the reverse).
    speedup_verdict: str = TIED
    speedup_range: list[float] | None = None

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
            "speedup_verdict": self.speedup_verdict,
            "speedup_range": self.speedup_range,
            "conditions": self.conditions,
            "comparisons": self.comparisons,
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


def _probe(runner: Runner, tick: Any, cores: int, args: list[str]) -> tuple[dict[str, Any], int | None]:
    """The probe's result, and the script's total of optimizer steps when it ran to its end in it.

    A short script (it ends before the probe has measured everything) is probed again with as
    many timed steps per measurement as its steps allow (at least :data:`MIN_STEPS`); one too
    short even for that is a :class:`TuneScriptError` that says how many more steps it needs.
    """
    threads = _thread_counts(cores, None)
    spec = {"mode": "probe", "loader_workers": worker_counts(min(2 * cores, 16)), "threads": threads}
    tick.start("baseline and bounds (loader alone, compute alone)")
    probe = runner.run(spec)
    if probe.get("status") != "ended":
        return probe, None
    total = int(probe.get("steps_seen") or 0)
    if _probe_complete(probe, len(threads)):
        return probe, total
    training = probe.get("training_loader") or {}
    config = training.get("config") or {}
    workers, prefetch = int(config.get("num_workers") or 0), int(config.get("prefetch_factor") or 2)
    # the baseline needs its warm-up, the clock's step and the timed ones; each compute bound
    # BASE_WARMUP steps and the timed ones
    fixed = steps_needed(workers, prefetch, 0) + len(threads) * BASE_WARMUP
    timed = (total - fixed) // (1 + len(threads))
    if training and total and timed >= MIN_STEPS:
        tick.done(f"the script trains {total} steps: again with {timed} timed steps per measurement")
        tick.start(f"baseline and bounds ({timed} timed steps each)")
        probe = runner.run(dict(spec, max_steps=timed))
        if _probe_complete(probe, len(threads)):
            return probe, total
    if not total or not training:
        return probe, total  # no steps or no training loader: the caller says which
    need = fixed + (1 + len(threads)) * MIN_STEPS
    raise TuneScriptError(
        f"the script trains only {total} optimizer step{'s' if total != 1 else ''}; tune needs at least "
        f"{need} (the baseline and {len(threads)} compute bounds, {MIN_STEPS} timed steps each, after "
        f"their warm-up): give {need - total} more steps, {_steps_hint(args)}"
    )


def _probe_complete(probe: dict[str, Any], threads: int) -> bool:
    segments = probe.get("segments", [])
    steps = [s.get("steps", 0) for s in segments if s["phase"] == "baseline"]
    computes = [s for s in segments if s["phase"] == "bound-compute" and s.get("steps", 0) >= MIN_STEPS]
    return bool(probe.get("training_loader")) and bool(steps) and steps[0] >= MIN_STEPS and len(computes) == threads


def _steps_hint(args: list[str]) -> str:
    """How to give the script more steps: its own option for epochs or steps when it was passed one."""
    for arg in args:
        name = arg.split("=", 1)[0]
        if name.startswith("-") and any(word in name.lower() for word in ("epoch", "iter", "step")):
            return f"e.g. with a larger `{name}` (the script's argument, after SCRIPT)"
    return "e.g. with more epochs or steps (the script's own argument, after SCRIPT)"


def _search(runner: Runner, script: str, args: list[str], settings: TuneSettings, progress: Any, start: float) -> Tuned:
    got = cores_got()
    cores = got.whole
    tick = progress or _NoProgress()
    tick.remaining(PROGRESS_UNITS)  # fixed now: units not needed are skipped, never added
    result = Tuned(script=script, args=args, cores=cores, budget=settings.budget, sandbox=runner.sandbox.kind)
    result.conditions = {"cores": got.to_dict(), "load_start": _round(load_average())}

    # 1. the probe: baseline and both bounds
    probe, script_steps = _probe(runner, tick, cores, args)
    result.notes.extend(probe.get("notes", []))
    segments = probe.get("segments", [])
    base_seg = next((s for s in segments if s["phase"] == "baseline"), None)
    training = probe.get("training_loader")
    if base_seg is None or training is None:
        steps = int(probe.get("steps_seen", 0))
        if steps == 0:
            why = "no optimizer step was seen: tune times the steps of a torch.optim optimizer"
        else:
            why = "; ".join(probe.get("notes", [])) or "the optimizer steps consumed no DataLoader batch"
        raise TuneScriptError(
            f"could not measure the script's training loop ({why}; {steps} optimizer step"
            f"{'s' if steps != 1 else ''} seen). tune runs the script as it is and needs it to train "
            "with a DataLoader and an optimizer."
        )
    result.training_loader = {
        "site": training.get("site"),
        "batch_size": training.get("batch_size"),
        "config": training.get("config"),
    }
    if script_steps is not None:
        result.notes.append(f"the script trains {script_steps} optimizer steps: each trial times fewer steps")
    load = _load_of(probe)
    others = _others_of(probe)
    script_threads = int(training["config"].get("torch_threads") or probe.get("script_threads") or 1)
    own = dict(training["config"], torch_threads=script_threads)
    base_share = base_seg.get("data_wait_share")
    result.trials.append(
        Trial(own, "baseline", base_seg.get("samples_per_s"), base_share, verdict_of(own, base_share), load, others)
    )
    loader_rates: dict[int, float] = {}
    compute_rates: dict[int, float] = {}
    compute_cpu: dict[int, float] = {}
    loader_cpu = None
    loader_queued = None
    receive_cpu: dict[int, float] = {}
    for seg in segments:
        rate = seg.get("samples_per_s")
        if seg["phase"] == "bound-loader":
            w = int(seg["config"]["num_workers"])
            cfg = dict(loader_kwargs_of(seg["config"]), torch_threads=script_threads)
            result.trials.append(Trial(cfg, "bound-loader", rate, None, "loader alone", load, others))
            if rate:
                loader_rates[w] = rate
                if w == 0:
                    loader_cpu = seg.get("cpu_s_per_sample")
                    loader_queued = seg.get("queued_s_per_sample")
                elif seg.get("cpu_s_per_sample") is not None:
                    receive_cpu[w] = seg["cpu_s_per_sample"]
        elif seg["phase"] == "bound-compute":
            t = int(seg["config"]["torch_threads"])
            cfg = dict(seg["config"])
            result.trials.append(
                Trial(
                    cfg,
                    "bound-compute",
                    rate,
                    seg.get("data_wait_share"),
                    "compute alone (cached batches)",
                    load,
                    others,
                )
            )
            if rate:
                compute_rates[t] = rate
                if seg.get("cpu_s_per_sample") is not None:
                    compute_cpu[t] = seg["cpu_s_per_sample"]
    tick.done(f"baseline {_rate(base_seg.get('samples_per_s'))}")
    if script_steps is None:
        tick.skip(1)  # the unit of a second probe, for a short script
    bounds = Bounds(loader_rates, compute_rates, loader_cpu, compute_cpu, cores, receive_cpu, loader_queued)
    result.limit = bounds.limit()
    # pin_memory only matters for host-to-GPU copies: tried (with workers) only when the run
    # used CUDA; on CPU it is never set
    pin = bool(own.get("pin_memory")) or bool(probe.get("uses_cuda"))

    # 2. search: only what the bounds say can win
    predictions: list[tuple[float, dict[str, Any]]] = []
    # The share of a core a loading process uses is CPU time over the time it could run: on
    # shared cores the wall time grows with its turns waited for a core (read from schedstat and
    # left out); where that is unknown, a contended probe counts loading as busy (TD104's case).
    probe_contended = result.trials[0].contended(got)
    # known where the loading's time queued for a core was read (schedstat), or measured quietly
    busy = bounds.worker_busy if loader_queued is not None or not probe_contended else None
    ceilings = {t: bounds.ceiling(t, busy) for t in sorted(compute_rates)}

    def ceiling(config: Mapping[str, Any]) -> int:
        """The worker ceiling of a configuration's thread count (TD104's, from the bounds)."""
        t = int(config.get("torch_threads") or script_threads)
        return ceilings.get(t, bounds.ceiling(t, busy))

    own_ceiling = ceiling(own)
    if own["num_workers"] > own_ceiling:
        result.notes.append(
            f"the script's num_workers={own['num_workers']} is above the {own_ceiling} worker"
            f"{'s' if own_ceiling != 1 else ''} {got.describe()} carry beside its training process "
            "(TD104's ceiling): it is measured, never recommended"
        )
    result.conditions["worker_ceiling"] = {str(t): c for t, c in ceilings.items()}
    for w in sorted(loader_rates):
        for t in sorted(compute_rates):
            if w > ceilings[t]:
                continue
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
    search_until = start + settings.budget * SEARCH_BUDGET_SHARE
    search_units = MAX_SEARCH + 1  # the queue, and one larger prefetch factor
    tried_prefetch = False
    while queue and search_units > 0:
        cfg = queue.pop(0)
        key = config_key(cfg)
        if key in measured:
            continue
        searched = len(measured) - 1
        pending_plain = plain_key is not None and plain_key not in measured
        if searched >= 1 and not pending_plain and time.perf_counter() + runner.typical_s() > search_until:
            result.notes.append(f"budget: {len(queue) + 1} predicted configuration(s) not measured")
            break
        timed = _timed_steps(cfg, script_steps, settings)
        if timed is None:
            result.notes.append(f"{label(cfg)} not measured: it needs more steps than the script's {script_steps}")
            continue
        search_units -= 1
        trial = _run_trial(runner, tick, cfg, "search", training, timed)
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
    tick.skip(search_units)

    # 3. confirm: the finalists again, interleaved, until their runs are told apart (or tied)
    finalists = choose_finalists({k: rates_of(v) for k, v in measured.items()}, configs, config_key(own), MAX_FINALISTS)
    rounds: list[dict[tuple[Any, ...], float]] = []
    overran = False
    while len(rounds) < MAX_CONFIRM_ROUNDS:
        order = finalists[len(rounds) % len(finalists) :] + finalists[: len(rounds) % len(finalists)]
        if time.perf_counter() + len(order) * runner.typical_s() > start + settings.budget:
            # Past the budget, up to min_rounds rounds still repeat the one pair that decides the
            # advice: the fastest and the simpler finalist recommended while they are undecided.
            if len(rounds) >= settings.min_rounds:
                break
            try:
                now = choose(
                    {k: rates_of(measured[k]) for k in finalists},
                    configs,
                    script_threads,
                    MEASURED_TIE,
                    MEASURED_GAIN,
                    ceiling,
                )
            except ValueError:  # nothing within the ceiling measured: said after the rounds
                break
            if not now.undecided:
                break
            order = [now.leader, now.best] if len(rounds) % 2 == 0 else [now.best, now.leader]
            overran = True
        this_round: dict[tuple[Any, ...], float] = {}
        for key in order:
            trial = _run_trial(
                runner, tick, configs[key], "confirm", training, _timed_steps(configs[key], script_steps, settings)
            )
            measured[key].append(trial)
            result.trials.append(trial)
            if trial.samples_per_s:
                this_round[key] = trial.samples_per_s
        tick.skip(MAX_FINALISTS - len(order))
        rounds.append(this_round)
        now_runs = {k: rates_of(measured[k]) for k in finalists}
        if decided(now_runs, MEASURED_TIE):
            break
        minor = undecided_minor(now_runs, configs, MEASURED_TIE)
        if minor:
            leader = max(now_runs, key=lambda k: median(now_runs[k]))
            result.notes.append(
                f"{label(configs[leader])} and {', '.join(label(configs[k]) for k in minor)} were not measured "
                "apart; they differ only in the loader's queue (prefetch factor, persistent workers), so the "
                "workers and threads advised do not depend on it and no more rounds were run"
            )
            break
    tick.skip((MAX_CONFIRM_ROUNDS - len(rounds)) * MAX_FINALISTS)
    if overran:
        result.notes.append(
            f"budget: ran past it to repeat the two finalists that decide the advice ({settings.min_rounds} "
            "confirmation rounds at least)"
        )

    # 4. the choice: the simplest finalist the fastest is not measured apart from
    runs = {k: rates_of(measured[k]) for k in finalists}
    try:
        choice = choose(runs, configs, script_threads, MEASURED_TIE, MEASURED_GAIN, ceiling)
    except ValueError:  # every trial within the worker ceiling failed
        failures = "; ".join(f"{label(t.config)}: {t.verdict}" for t in result.trials if t.verdict.startswith("failed"))
        most = max(ceilings.values(), default=own_ceiling)
        raise TuneScriptError(
            f"no configuration with at most {most} worker{'s' if most != 1 else ''} could be measured"
            + (f" ({failures})" if failures else "")
        ) from None
    if choice.undecided and len(rounds) < MAX_CONFIRM_ROUNDS:
        result.notes.append(
            f"budget: {len(rounds)} confirmation round{'s' if len(rounds) != 1 else ''}, too few to tell "
            f"{label(configs[choice.leader])} from the simpler {label(configs[choice.best])}; the simpler is "
            "recommended (raise --budget for more repeats)"
        )
    best_key = choice.best
    best_cfg = configs[best_key]
    best_rate = median(runs[best_key])
    base_key = config_key(own)
    base_rate = median(runs[base_key])
    shares = [t.data_wait_share for t in measured[best_key] if t.data_wait_share is not None]
    best_share = statistics.median(shares) if shares else None
    base_shares = [t.data_wait_share for t in measured[base_key] if t.data_wait_share is not None]
    base_share_med = statistics.median(base_shares) if base_shares else None
    result.baseline = {
        "config": own,
        "settings": loader_kwargs_of(own),
        "torch_threads": script_threads,
        "samples_per_s": round(base_rate, 3),
        "runs": len(runs[base_key]),
        "interval": _interval(runs[base_key]),
        "data_wait_share": _round(base_share_med),
    }
    result.best = {
        "config": best_cfg,
        "samples_per_s": round(best_rate, 3),
        "runs": len(runs[best_key]),
        "interval": _interval(runs[best_key]),
        "data_wait_share": _round(best_share),
    }
    result.comparisons = [
        {
            "config": configs[k],
            "runs": [round(r, 3) for r in runs[k]],
            "interval": _interval(runs[k]),
            "median": round(median(runs[k]), 3),
            "against_fastest": "fastest" if k == choice.leader else choice.verdicts[k],
        }
        for k in finalists
    ]
    versus = compare(runs[best_key], runs[base_key], MEASURED_TIE) if best_key != base_key else TIED
    result.speedup = best_rate / base_rate if base_rate > 0 else None
    result.speedup_verdict = versus
    if best_key != base_key and len(runs[best_key]) > 1 and len(runs[base_key]) > 1:
        result.speedup_range = [
            round(min(runs[best_key]) / max(runs[base_key]), 3),
            round(max(runs[best_key]) / min(runs[base_key]), 3),
        ]
    _judge_limit(result, best_rate)
    recommended = loader_kwargs_of(best_cfg)
    if keep_workers(best_cfg["num_workers"]) and not recommended["persistent_workers"]:
        recommended["persistent_workers"] = True
        result.notes.append(
            "persistent_workers=True: the workers are kept between epochs (TD103's judgement; a "
            "trial runs inside one epoch and does not see their start-up)"
        )
    if best_cfg["torch_threads"] != script_threads:
        recommended["torch_threads"] = best_cfg["torch_threads"]
    result.recommended = recommended
    result.bottleneck_before = verdict_of(own, base_share_med)
    result.bottleneck_after = verdict_of(best_cfg, best_share)
    _judge_contention(result, got, rounds, choice, configs)
    result.elapsed_s = time.perf_counter() - start
    tick.skip(PROGRESS_UNITS)
    tick.close()
    return result


def rates_of(trials: list[Trial]) -> list[float]:
    """The samples/s of the trials that measured one."""
    return [t.samples_per_s for t in trials if t.samples_per_s]


def _timed_steps(cfg: dict[str, Any], script_steps: int | None, settings: TuneSettings) -> int | None:
    """Timed steps a trial of ``cfg`` may take: ``max_steps``, or what a short script's steps
    leave after the warm-up (None: fewer than :data:`MIN_STEPS`)."""
    if script_steps is None:
        return settings.max_steps
    workers = int(cfg.get("num_workers", 0))
    timed = script_steps - steps_needed(workers, int(cfg.get("prefetch_factor") or 2), 0)
    return min(timed, settings.max_steps) if timed >= MIN_STEPS else None


def _interval(rates: list[float]) -> list[float] | None:
    span = interval(rates)
    return None if span is None else [round(span[0], 3), round(span[1], 3)]


def _load_of(out: dict[str, Any]) -> tuple[float | None, float | None]:
    load = out.get("load") or [None, None]
    return (load[0], load[1])


def _others_of(out: dict[str, Any]) -> float | None:
    others = out.get("others")
    return float(others) if isinstance(others, (int, float)) else None


def _judge_limit(result: Tuned, best_rate: float) -> None:
    """The share of the limit the best reaches, never above 100%: a best measured faster than the
    limit (beyond the tie margin) means the bounds were measured under other conditions."""
    limit = result.limit
    if not limit or not limit["samples_per_s"]:
        return
    share = best_rate / limit["samples_per_s"]
    if share <= 1 + MEASURED_TIE:
        limit["reached"] = round(min(share, 1.0), 3)
        return
    limit["reached"] = None
    limit["valid"] = False
    probe_load = result.trials[0].peak_load
    at = f" (load {probe_load:.1f} then)" if probe_load is not None else ""
    result.notes.append(
        f"the best ran at {best_rate:.1f} samples/s, {share:.0%} of the limit the probe measured{at}: "
        "the bounds were measured under other load and do not bound this machine's speed now"
    )


def _judge_contention(
    result: Tuned,
    got: Cores,
    rounds: list[dict[tuple[Any, ...], float]],
    choice: Choice,
    configs: dict[tuple[Any, ...], dict[str, Any]],
) -> None:
    """Whether the advice depends on contention: other programs busy on the cores during a trial
    (:meth:`Trial.contended`), or finalists whose order flipped between rounds."""
    judged = [t for t in result.trials if t.phase in ("baseline", "search", "confirm")]
    known = [x for x in (t.peak_load for t in judged) if x is not None]
    busy = [t for t in judged if t.contended(got)]
    others = [t.others for t in judged if t.others is not None]
    flips = []
    for key in choice.verdicts:
        pairs = [(r[choice.leader], r[key]) for r in rounds if choice.leader in r and key in r]
        if flipped(pairs):
            flips.append(label(configs[key]))
    result.conditions.update(
        load_end=_round(load_average()),
        peak_load=_round(max(known)) if known else None,
        others_peak=_round(max(others)) if others else None,
        contended_trials=len(busy),
        trials=len(judged),
        flipped=flips,
        depends_on_contention=bool(busy or flips),
    )
    if busy and others:
        result.notes.append(
            f"advice depends on contention: other programs kept more than {got.effective * OTHERS_SHARE:g} "
            f"of {got.describe()} busy during {len(busy)} of {len(judged)} trials, up to "
            f"{max(t.others or 0.0 for t in busy):.1f} cores; the numbers are those of a busy machine: "
            "tune again when it is quiet, or under the load you train with"
        )
    elif busy:
        result.notes.append(
            f"advice depends on contention: the load average was above {got.effective * CONTENDED_SHARE:g} "
            f"(half of {got.describe()}) during {len(busy)} of {len(judged)} trials, up to "
            f"{max(t.peak_load or 0.0 for t in busy):.1f}; "
            "other processes shared the cores, so the numbers are those of a busy machine: tune again "
            "when it is quiet, or under the load you train with"
        )
    if flips:
        result.notes.append(
            f"advice depends on contention: {label(configs[choice.leader])} and {', '.join(flips)} "
            "swapped places between repeated rounds"
        )


def _run_trial(
    runner: Runner, tick: Any, cfg: dict[str, Any], phase: str, training: dict[str, Any], timed: int | None
) -> Trial:
    tick.start(f"{phase} {label(cfg)}")
    spec: dict[str, Any] = {"mode": "trial", "config": cfg, "site": training.get("site")}
    if timed is not None:
        spec["max_steps"] = timed
    out = runner.run(spec)
    load = _load_of(out)
    others = _others_of(out)
    seg = next((s for s in out.get("segments", []) if s["phase"] == "search"), None)
    if seg is None:
        why = out.get("error") or "; ".join(out.get("notes", [])) or "the script ended too soon"
        trial = Trial(cfg, phase, None, None, f"failed: {why}", load, others)
    else:
        share = seg.get("data_wait_share")
        trial = Trial(cfg, phase, seg.get("samples_per_s"), share, verdict_of(cfg, share), load, others)
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
    def skip(self, units: int) -> None: ...
    def close(self) -> None: ...


__all__ = [
    "Runner",
    "Trial",
    "TuneScriptError",
    "TuneSettings",
    "Tuned",
    "config_key",
    "label",
    "loader_kwargs_of",
    "rates_of",
    "tune_script",
    "verdict_of",
]
