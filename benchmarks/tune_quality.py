"""How good is ``traindoctor tune SCRIPT``? Tuned vs. the script's default vs. an exhaustive grid.

On a bundled decode-heavy CPU pipeline (``benchmarks/pipelines/jpeg_pipeline.py``: Pillow JPEG
decoding and augmentation of images generated at start, a small CNN), all in one run:

1. ``tune``: ``traindoctor tune SCRIPT --budget B`` (bounds, model-pruned search, confirmation);
   its wall time is the tuning cost;
2. ``grid``: every configuration of the same knobs (``num_workers`` 0, 1, 2, 4, ... up to twice
   the usable cores; with workers ``persistent_workers`` False/True and ``prefetch_factor`` 2/4;
   torch threads 1, 2, 4, ... up to the cores), each measured once with the same trial length
   as tune's; its wall time is the grid's cost;
3. the final comparison, as **whole processes**: the script run to its end (with
   ``--whole-args``, default ``--epochs 2``, appended to its arguments) under the script's
   default, the tuned configuration and the grid's best, in ``--rounds`` interleaved rounds (the
   order rotating every round, so drift in machine load hits all three alike); each one's number
   is the median over rounds of samples trained / the process's wall time (forked from a
   process that imported torch, so torch's import is left out of all three alike).

The machine's load average is recorded before and after every whole run, and the cores other
programs kept busy during it (the machine's CPU time less that of the benchmark's own processes,
:func:`traindoctor.machine.others_cores`), and printed with the table: numbers measured on shared
cores are those of a busy machine.

Targets: tuned >= 0.95 x grid-best samples/s, found in <= 1/4 of the grid's wall time.

    python benchmarks/tune_quality.py [--budget 60] [--rounds 3] [--script PATH] [--json OUT]

Takes a few minutes on a 2-core machine (each trial is a fresh Python process importing torch).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

from traindoctor.machine import usable_cores
from traindoctor.tune.measure import worker_counts
from traindoctor.tune.progress import Progress
from traindoctor.tune.script import (
    Runner,
    TuneSettings,
    _thread_counts,
    label,
    tune_script,
)

HERE = Path(__file__).resolve().parent
DEFAULT_SCRIPT = HERE / "pipelines" / "jpeg_pipeline.py"


def grid(cores: int) -> list[dict]:
    configs = []
    for threads in _thread_counts(cores, None):
        for workers in worker_counts(min(2 * cores, 16)):
            if workers == 0:
                configs.append({"num_workers": 0, "torch_threads": threads})
                continue
            for persistent in (False, True):
                for prefetch in (2, 4):
                    configs.append(
                        {
                            "num_workers": workers,
                            "persistent_workers": persistent,
                            "prefetch_factor": prefetch,
                            "torch_threads": threads,
                        }
                    )
    return configs


def trial(runner: Runner, config: dict, site: list | None) -> tuple[float | None, float]:
    start = time.perf_counter()
    out = runner.run({"mode": "trial", "config": config, "site": site})
    seg = next((s for s in out.get("segments", []) if s["phase"] == "search"), None)
    return (seg or {}).get("samples_per_s"), time.perf_counter() - start


def whole(runner: Runner, config: dict, site: list | None) -> tuple[float | None, list, float | None]:
    """samples/s of one whole run of the script under ``config``, the load before and after it,
    and the cores other programs kept busy while it ran."""
    out = runner.run({"mode": "whole", "config": config, "site": site})
    seconds = runner.durations[-1]
    samples = out.get("samples_seen") or 0
    load, others = out.get("load") or [None, None], out.get("others")
    if out.get("status") == "failed" or not samples:
        return None, load, others
    return samples / seconds, load, others


def _load(value: float | None) -> str:
    return "?" if value is None else f"{value:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--script", default=str(DEFAULT_SCRIPT))
    parser.add_argument("--budget", type=float, default=60.0, help="tune's --budget")
    parser.add_argument("--rounds", type=int, default=3, help="final interleaved rounds")
    parser.add_argument("--json", help="write the numbers here")
    parser.add_argument(
        "--whole-args",
        default="--epochs 2",
        help="appended to the script's arguments for the whole runs of the final comparison",
    )
    parser.add_argument("script_args", nargs="*")
    args = parser.parse_args()

    cores = usable_cores()
    settings = TuneSettings(budget=args.budget)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"# tune quality on {os.path.relpath(args.script)} ({cores} usable cores, "
        f"load average {load:.1f} at start, {settings.measure_s():.2f} s per measurement)\n"
    )

    # 1. tune
    t0 = time.perf_counter()
    progress = Progress("tune", 4)
    tuned = tune_script(args.script, args.script_args, settings=settings, progress=progress)
    progress.close()
    tune_s = time.perf_counter() - t0
    site = (tuned.training_loader or {}).get("site")
    # what tune recommends: the best's settings (with the persistent workers it adds to them)
    tuned_cfg = dict(tuned.best["config"], persistent_workers=tuned.recommended["persistent_workers"])
    default_cfg = tuned.baseline["config"]

    with tempfile.TemporaryDirectory(prefix="traindoctor-bench-") as scratch:
        runner = Runner(args.script, args.script_args, settings, Path(scratch))
        # 2. the exhaustive grid
        configs = grid(cores)
        progress = Progress("grid", len(configs))
        grid_rates: list[tuple[float, dict]] = []
        grid_s = 0.0
        for config in configs:
            progress.start(label(config))
            rate, seconds = trial(runner, config, site)
            grid_s += seconds
            progress.done(f"{rate:.1f} samples/s" if rate else "failed")
            if rate:
                grid_rates.append((rate, config))
        progress.close()
        grid_best = max(grid_rates, key=lambda rc: rc[0])[1]

        # 3. final comparison: whole processes, interleaved and repeated
        contenders = {"default": default_cfg, "tuned": tuned_cfg, "grid-best": grid_best}
        names = list(contenders)
        rates: dict[str, list[float]] = {name: [] for name in names}
        loads: list[float] = []
        others: list[float] = []
        (Path(scratch) / "whole").mkdir()
        whole_runner = Runner(
            args.script,
            [*args.script_args, *args.whole_args.split()],
            TuneSettings(budget=args.budget, timeout=3600.0),
            Path(scratch) / "whole",
        )
        progress = Progress("final (whole runs)", args.rounds * len(names))
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                progress.start(f"round {r + 1} {name}")
                rate, load_pair, busy = whole(whole_runner, contenders[name], site)
                loads.extend(x for x in load_pair if x is not None)
                if busy is not None:
                    others.append(busy)
                progress.done(
                    (f"{rate:.1f} samples/s" if rate else "failed")
                    + f" (load {'-'.join(map(_load, load_pair))}, other programs {_load(busy)} cores)"
                )
                if rate:
                    rates[name].append(rate)
        progress.close()
        whole_runner.close()
        runner.close()

    median = {name: statistics.median(v) if v else 0.0 for name, v in rates.items()}
    quality = median["tuned"] / median["grid-best"] if median["grid-best"] else 0.0
    cost = tune_s / grid_s if grid_s else 0.0
    speedup = median["tuned"] / median["default"] if median["default"] else 0.0
    load_end = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")

    low, high = (min(loads), max(loads)) if loads else (None, None)
    o_low, o_high = (min(others), max(others)) if others else (None, None)
    print(
        f"whole runs ({' '.join([os.path.relpath(args.script), *args.script_args, args.whole_args])}), "
        f"measured at load average {_load(low)} to {_load(high)} (the runs' own processes included) on "
        f"{cores} usable cores; other programs kept {_load(o_low)} to {_load(o_high)} cores busy"
        + (
            " (a busy machine: other programs used more than a quarter of the cores)"
            if o_high is not None and o_high > cores / 4
            else " (a quiet machine)"
            if o_high is not None
            else ""
        )
    )
    print(f"| configuration | settings | samples/s (median of {args.rounds} whole runs) | runs | vs default |")
    print("|---|---|---:|---|---:|")
    for name in names:
        ratio = median[name] / median["default"] if median["default"] else 0.0
        runs = ", ".join(f"{x:.1f}" for x in rates[name])
        print(f"| {name} | `{label(contenders[name])}` | {median[name]:.1f} | {runs} | {ratio:.2f}x |")
    print()
    print(
        f"tune:  {tune_s:.1f} s wall ({len(tuned.trials)} measurements; "
        f"bottleneck {tuned.bottleneck_before} -> {tuned.bottleneck_after})"
    )
    print(f"grid:  {grid_s:.1f} s wall ({len(configs)} configurations)")
    print(f"tuned / grid-best samples/s = {quality:.3f} (target >= 0.95): {'PASS' if quality >= 0.95 else 'FAIL'}")
    print(f"tune time / grid time = {cost:.3f} (target <= 0.25): {'PASS' if cost <= 0.25 else 'FAIL'}")
    print(f"speed-up of the tuned configuration over the script's default: {speedup:.2f}x")
    print(
        f"load average {load:.1f} at start, {load_end:.1f} at the end, {_load(low)} to {_load(high)} "
        f"during the whole runs; other programs: up to {_load(tuned.conditions.get('others_peak'))} cores during "
        f"tune's trials, {_load(o_low)} to {_load(o_high)} during the whole runs"
    )
    notes = [n for n in tuned.notes if "contention" in n]
    for note in notes:
        print(f"tune's note: {note}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "cores": cores,
                    "rounds": args.rounds,
                    "budget_s": args.budget,
                    "configs": {k: v for k, v in contenders.items()},
                    "samples_per_s": median,
                    "runs": rates,
                    "tune_s": tune_s,
                    "grid_s": grid_s,
                    "quality": quality,
                    "cost": cost,
                    "speedup": speedup,
                    "load_average": [load, load_end],
                    "whole_run_load": [low, high],
                    "whole_run_others": [o_low, o_high],
                    "whole_args": args.whole_args,
                    "tune": tuned.to_dict(),
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if quality >= 0.95 and cost <= 0.25 else 1


if __name__ == "__main__":
    sys.exit(main())
