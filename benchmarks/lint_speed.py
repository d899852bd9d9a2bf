"""How fast is `traindoctor check` compared with `ast.parse` alone on the same files?

Default corpus: the installed torch package (thousands of real files). Both sides read the same
bytes from memory (file I/O is excluded), decode them and parse them; the checker then builds its
index and runs every enabled static rule. Each side runs ``--repeat`` times, interleaved, and the
fastest run of each is reported (the usual way to time CPU-bound code on a busy machine).

    python benchmarks/lint_speed.py [CORPUS_DIR ...] [--repeat 3] [--limit N] [--cpu-time]

``--cpu-time`` measures the CPU time of this process instead of wall-clock time: on a machine
shared with other jobs the ratio then does not move with the load.
"""

from __future__ import annotations

import argparse
import ast
import gc
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from traindoctor.config import Settings  # noqa: E402
from traindoctor.static.discovery import iter_python_files  # noqa: E402
from traindoctor.static.engine import check_source, decode_source, instantiate  # noqa: E402


def default_corpus() -> list[str]:
    import importlib.util

    spec = importlib.util.find_spec("torch")  # locating the package does not import it
    if spec is None or not spec.submodule_search_locations:
        sys.exit("torch is not installed: pass a corpus directory")
    return list(spec.submodule_search_locations)


def load(paths: list[str], limit: int | None) -> list[tuple[str, bytes]]:
    files = []
    for path in iter_python_files(paths, excludes=["__pycache__"], respect_gitignore=False):
        try:
            files.append((str(path), path.read_bytes()))
        except OSError:
            continue
        if limit and len(files) >= limit:
            break
    return files


CLOCK = time.perf_counter


def time_parse(files: list[tuple[str, bytes]]) -> float:
    start = CLOCK()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, data in files:
            try:
                ast.parse(decode_source(data), filename=name)
            except Exception:
                pass
    return CLOCK() - start


def time_check(files: list[tuple[str, bytes]], settings: Settings, rules) -> tuple[float, int, int]:
    findings = errors = 0
    start = CLOCK()
    for name, data in files:
        result = check_source(data, name, settings, rules)
        findings += len(result.findings)
        errors += len(result.internal_errors)
    return CLOCK() - start, findings, errors


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--limit", type=int, default=None, help="check only the first N files")
    ap.add_argument("--cpu-time", action="store_true", help="time CPU use of this process, not wall clock")
    args = ap.parse_args()
    global CLOCK
    if args.cpu_time:
        CLOCK = time.process_time
    paths = args.paths or default_corpus()
    files = load(paths, args.limit)
    lines = sum(data.count(b"\n") for _, data in files)
    settings = Settings(min_torch_version="2.13")
    rules = instantiate(settings.enabled_codes())
    parse_times, check_times = [], []
    findings = errors = 0
    for _ in range(args.repeat):
        gc.collect()
        parse_times.append(time_parse(files))
        gc.collect()
        t, findings, errors = time_check(files, settings, rules)
        check_times.append(t)
    tp, tc = min(parse_times), min(check_times)
    print(f"corpus: {', '.join(paths)}")
    clock = "CPU time" if args.cpu_time else "wall clock"
    print(f"{len(files)} files, {lines} lines, {len(rules)} static rules, best of {args.repeat} ({clock})")
    print()
    print("| step | seconds | files/s | lines/s | vs ast.parse |")
    print("|---|---:|---:|---:|---:|")
    print(f"| `ast.parse` alone | {tp:.2f} | {len(files) / tp:,.0f} | {lines / tp:,.0f} | 1.00x |")
    print(f"| `traindoctor check` | {tc:.2f} | {len(files) / tc:,.0f} | {lines / tc:,.0f} | {tc / tp:.2f}x |")
    print()
    print(f"findings: {findings}; internal errors: {errors}")
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
