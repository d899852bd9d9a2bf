"""How fast is `traindoctor check` compared with `ast.parse` alone on the same files?

Default corpus: the installed torch package (thousands of real files). Both sides read the same
bytes from memory (file I/O is excluded), decode them and parse them; the checker then builds its
index and runs every enabled static rule. Each side runs ``--repeat`` times, interleaved, and the
fastest run of each is reported (the usual way to time CPU-bound code on a busy machine).

Three checker rows, each against single-core ``ast.parse``:

- one core: every file checked in this process (``--jobs 1``);
- parallel: what ``traindoctor check`` does by default, worker processes on all usable cores;
- cached re-run: nothing changed since the last run, so every file is answered from the cache
  (opening the cache file, hashing each file's content, validating its dependencies, rebuilding
  its findings) as a second ``traindoctor check`` would.

``--cpu-time`` times the in-process rows (``ast.parse``, one core, cached re-run) by this process's
CPU time instead of wall time: on a machine shared with other work, wall time also counts the
time other processes held the core, CPU time much less so. The parallel row is always wall time
(its work runs in worker processes).

``--whole`` times whole processes instead, as a user runs them, interleaved ``--repeat`` times:
``python`` parsing every file with ``ast.parse`` (reading them from disk), ``traindoctor check
--no-cache -j 1`` and ``traindoctor check --no-cache`` (the default ``--jobs``); it reports the
median of each and of the pairwise ratios. ``--busy K`` runs K busy-looping processes during the
whole measurement (a reproducible load: the default ``--jobs`` must not be slower than ``-j 1``
on a busy machine either).

    python benchmarks/lint_speed.py [CORPUS_DIR ...] [--repeat 3] [--limit N] [--jobs N] [--cpu-time]
    python benchmarks/lint_speed.py --whole [--repeat 5] [--busy K] [CORPUS_DIR ...]
"""

from __future__ import annotations

import argparse
import ast
import gc
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from traindoctor.check.cache import Cache
from traindoctor.check.discovery import iter_python_files
from traindoctor.check.engine import instantiate
from traindoctor.check.runner import CheckOptions, check_many
from traindoctor.config import Settings
from traindoctor.machine import usable_cores
from traindoctor.static.project import forget_projects
from traindoctor.static.source import decode_source


def default_corpus() -> list[str]:
    import importlib.util

    spec = importlib.util.find_spec("torch")  # locating the package does not import it
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torch is not installed: pass a corpus directory")
    return list(spec.submodule_search_locations)


def load(paths: list[str], limit: int | None) -> list[tuple[str, bytes]]:
    files = []
    for path in iter_python_files(paths, excludes=["__pycache__"], respect_gitignore=False):
        if path.suffix == ".ipynb":
            continue  # ast.parse cannot read notebooks: the comparison is over Python files
        try:
            files.append((str(path), path.read_bytes()))
        except OSError:
            continue
        if limit and len(files) >= limit:
            break
    return files


#: The clock of the in-process rows: wall time, or this process's CPU time (``--cpu-time``).
clock = time.perf_counter


def time_parse(files: list[tuple[str, bytes]]) -> float:
    start = clock()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, data in files:
            try:
                ast.parse(decode_source(data), filename=name)
            except Exception:
                pass
    return clock() - start


def time_check(
    files: list[tuple[str, bytes]], settings: Settings, rules, jobs: int, cache_dir: Path | None = None
) -> tuple[float, int, int]:
    """Seconds to check every file; with ``cache_dir``, through the cache stored there."""
    timer = clock if jobs == 1 else time.perf_counter  # workers' CPU time is not this process's
    forget_projects()  # each run reads the project anew (a warm memo made repeats 2-3x faster)
    start = timer()
    cache = Cache.open(cache_dir, settings) if cache_dir is not None else None
    outcomes = check_many(files, settings, CheckOptions(jobs=jobs), cache=cache, rules=rules)
    elapsed = timer() - start
    if cache is not None:
        if cache.misses:
            sys.exit(f"cache re-run missed {cache.misses} files: the cached timing would be wrong")
    findings = sum(len(o.findings) for o in outcomes)
    errors = sum(len(o.internal_errors) for o in outcomes)
    return elapsed, findings, errors


PARSE_ALL = """
import ast, sys, warnings
from pathlib import Path
warnings.simplefilter("ignore")
for root in sys.argv[1:]:
    for path in sorted(Path(root).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        try:
            ast.parse(path.read_bytes(), filename=str(path))
        except Exception:
            pass
"""


def _busy() -> None:  # pragma: no cover - runs in a child process
    while True:
        pass


def whole(paths: list[str], repeat: int, busy: int) -> int:
    """Whole processes, interleaved: parse alone, check -j 1, check with the default jobs."""
    import multiprocessing
    import statistics
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent / "src")}
    commands = {
        "parse": [sys.executable, "-c", PARSE_ALL, *paths],
        "one": [sys.executable, "-m", "traindoctor", "check", *paths, "--no-cache", "--exit-zero", "-q", "-j", "1"],
        "default": [sys.executable, "-m", "traindoctor", "check", *paths, "--no-cache", "--exit-zero", "-q"],
    }
    hogs = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(busy)]
    for hog in hogs:
        hog.start()
    times: dict[str, list[float]] = {name: [] for name in commands}
    loads: list[float] = []
    try:
        time.sleep(5 if busy else 0)
        for i in range(repeat):
            order = list(commands)[i % 3 :] + list(commands)[: i % 3]  # rotate: drift hits all alike
            for name in order:
                loads.append(os.getloadavg()[0])
                start = time.perf_counter()
                subprocess.run(commands[name], env=env, check=True, stdout=subprocess.DEVNULL)
                times[name].append(time.perf_counter() - start)
    finally:
        for hog in hogs:
            hog.terminate()
    med = {name: statistics.median(t) for name, t in times.items()}
    ratio_one = statistics.median(o / p for o, p in zip(times["one"], times["parse"]))
    ratio_default = statistics.median(d / o for d, o in zip(times["default"], times["one"]))
    print(f"corpus: {', '.join(paths)}")
    print(
        f"whole processes, {repeat} interleaved rounds; {usable_cores()} usable cores; {busy} busy "
        f"processes; load average during the runs {min(loads):.1f}-{max(loads):.1f}"
    )
    print()
    print("| process | median seconds | ratio (median of pairs) |")
    print("|---|---:|---:|")
    print(f"| `python` + `ast.parse` of every file | {med['parse']:.2f} | 1.00x |")
    print(f"| `traindoctor check --no-cache -j 1` | {med['one']:.2f} | {ratio_one:.2f}x parse |")
    print(f"| `traindoctor check --no-cache` (default jobs) | {med['default']:.2f} | {ratio_default:.2f}x `-j 1` |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limit", type=int, default=None, help="check only the first N files")
    ap.add_argument("--jobs", type=int, default=0, help="workers for the parallel row (default: all cores)")
    ap.add_argument(
        "--cpu-time", action="store_true", help="time the in-process rows by CPU time (steadier on a shared machine)"
    )
    ap.add_argument("--whole", action="store_true", help="time whole processes (parse, check -j 1, default jobs)")
    ap.add_argument("--busy", type=int, default=0, help="with --whole: busy-looping processes during the runs")
    args = ap.parse_args()
    if args.whole:
        return whole(args.paths or default_corpus(), args.repeat, args.busy)
    global clock
    clock = time.process_time if args.cpu_time else time.perf_counter
    paths = args.paths or default_corpus()
    files = load(paths, args.limit)
    lines = sum(data.count(b"\n") for _, data in files)
    settings = Settings(min_torch_version="2.13")
    rules = instantiate(settings.enabled_codes())
    jobs = args.jobs or usable_cores()
    rows: dict[str, list[float]] = {"parse": [], "one": [], "parallel": [], "cached": []}
    counts: dict[str, tuple[int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="td-bench-cache-") as tmp:
        cache_dir = Path(tmp)
        # Fill the cache once (a first `traindoctor check`), then time re-runs.
        fill = Cache.open(cache_dir, settings)
        check_many(files, settings, CheckOptions(jobs=jobs), cache=fill, rules=rules)
        fill.save()
        for _ in range(args.repeat):
            gc.collect()
            rows["parse"].append(time_parse(files))
            for name, run_jobs, cached in (("one", 1, None), ("parallel", jobs, None), ("cached", 1, cache_dir)):
                gc.collect()
                t, findings, errors = time_check(files, settings, rules, run_jobs, cached)
                rows[name].append(t)
                counts[name] = (findings, errors)
    best = {name: min(times) for name, times in rows.items()}
    tp = best["parse"]
    load_avg = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    print(f"corpus: {', '.join(paths)}")
    print(
        f"{len(files)} files, {lines} lines, {len(rules)} static rules, best of {args.repeat}; "
        f"{usable_cores()} usable cores, load average {load_avg}"
    )
    if args.cpu_time:
        print("in-process rows timed by CPU time; the parallel row by wall time")
    print()
    print("| step | seconds | files/s | lines/s | vs ast.parse |")
    print("|---|---:|---:|---:|---:|")
    labels = {
        "parse": "`ast.parse` alone (one core)",
        "one": "`traindoctor check --jobs 1`",
        "parallel": f"`traindoctor check` ({jobs} jobs)",
        "cached": "`traindoctor check`, cached re-run",
    }
    for name, label in labels.items():
        t = best[name]
        print(f"| {label} | {t:.2f} | {len(files) / t:,.0f} | {lines / t:,.0f} | {t / tp:.2f}x |")
    print()
    findings, errors = counts["one"]
    print(f"findings: {findings}; internal errors: {errors}")
    if counts["parallel"] != counts["one"] or counts["cached"] != counts["one"]:
        print(f"MISMATCH: one core {counts['one']}, parallel {counts['parallel']}, cached {counts['cached']}")
        return 1
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
