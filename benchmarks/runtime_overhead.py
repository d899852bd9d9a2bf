"""Runtime doctor overhead, as a user meets it: whole process, start-up, and per step.

Three measurements, each in interleaved pairs (the order alternating every pair, so drift in machine
load hits both sides alike), reported as medians of the per-pair ratios/differences, and for the
whole process also as the mean difference with its 95% confidence interval:

1. **Whole process**: ``python loop.py`` against ``traindoctor run loop.py`` on the issue's loop
   (CPU, ~15 ms steps, a shuffled ``TensorDataset`` DataLoader re-created every epoch, LayerNorm,
   AdamW). Wall time and CPU time (user + sys of the child process, from ``getrusage``). This is
   the number a user notices; target <= 1.03x.
2. **Start-up**: ``python -c "import torch"``-equivalent script against ``traindoctor run`` of the
   same script: the fixed cost (importing the doctor and its rules, installing probes, writing the
   report).
3. **Per step**: the same loop in this process, unwatched and under ``traindoctor.watch()``,
   timing whole epochs *including* ``DataLoader(...)`` construction and ``iter()`` (CPU time of the
   training thread, from inside the watch: its start and stop are start-up costs, counted in 2),
   divided by the steps: the doctor's cost per training step; target <= 100 us.

Why the old benchmark said 1.019 while whole processes differed by 1.05-1.08x: it timed only the
median step after warm-up, so it left out the doctor's start-up (imports of the rule modules,
probe installation, the report), the per-epoch DataLoader construction and ``iter()`` (outside its
timed region), and on machines with ``PYTHONDONTWRITEBYTECODE=1`` (or a read-only install) every
start compiled the doctor's modules from source. This benchmark compiles the bytecode first (as
``pip install`` does) and says whether the environment would prevent it.

Why 16 pairs: two runs of the *same* command differ by several percent on a quiet machine, for
reasons that have nothing to do with the doctor. The loop frees and re-allocates its gradients every
step; whether glibc's heap trims and re-faults them (about 2,000 page faults a step) depends on the
heap layout, which address-space randomisation changes from run to run (400k-700k minor faults per
run, either side); Python's full garbage collections (60-130 ms each with torch's ~280k objects)
land at different moments. Measured here: per-pair differences with a standard deviation of
250-320 ms on a 4.7 s run, so 8 pairs leave the ratio uncertain by about +-2%. The confidence
interval printed with the mean says how far to trust the number.

The whole-process rows also split each child's CPU time in three, from marks the loop writes itself
(its process CPU time when ``main()`` starts and returns, to the file named by
``TD_BENCH_SEGMENTS``; both sides alike): until training starts (the interpreter, the doctor's
start-up, ``import torch``), training, and after training (the doctor's report, the process exit).
The first and last parts vary little between runs (standard deviation about 20 and 50 ms), so their
added cost is known within a few milliseconds; the training part carries nearly all the noise.

``--fixed-heap`` takes the page-fault lottery out of both sides alike: the children run with
``GLIBC_TUNABLES`` fixing glibc's mmap and trim thresholds (freed gradients stay in the heap, so
neither side re-faults them). The doctor does not shift the lottery (mean minor faults per run: 527k
plain, 527k watched over 20 pairs), so the expected difference is the same with a smaller spread.
It changes the allocator for the measurement only, never for a user's run.

``--huge-pages`` takes the other lottery out: which physical pages back the model's large tensors.
Two runs of the same plain loop with the same virtual layout still differ by several percent in
their forward, backward and optimizer times (caches are indexed by physical address, and the
kernel hands out different pages every run). With ``THP_MEM_ALLOC_ENABLE=1`` torch's CPU allocator
gives tensors of 2 MiB and more 2 MiB-aligned transparent huge pages (where the kernel allows
``madvise``), on both sides alike. Measured on the plain loop, 10 runs each: standard deviation of
the training part 165 ms without, 57 ms with. Like ``--fixed-heap`` it changes the measurement's
allocator only.

    python benchmarks/runtime_overhead.py [--pairs 16] [--steps 200] [--fixed-heap] [--huge-pages]
                                          [--quick]

On a busy machine use the CPU columns: wall time then mostly measures waiting for a core. When
even those are noisier than the cost (a shared machine under load), count instructions instead:
``benchmarks/overhead_instructions.py`` (valgrind) gives the doctor's per-step and start-up cost
independent of load.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"

LOOP = textwrap.dedent(
    '''
    """~15 ms CPU steps; a shuffled TensorDataset DataLoader re-created each epoch; LayerNorm; AdamW."""
    import os
    import sys
    import time

    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset


    def main(steps, width=WIDTH):
        torch.manual_seed(0)
        data = TensorDataset(torch.randn(64 * 16, width), torch.randint(0, 10, (64 * 16,)))
        model = nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU(),
                              nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU(),
                              nn.Linear(width, 10))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        done = 0
        while done < steps:
            for x, y in DataLoader(data, batch_size=64, shuffle=True):
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                done += 1
                if done >= steps:
                    break
        return loss.item()


    if __name__ == "__main__":
        torch.set_num_threads(1)
        before = time.process_time()
        loss = main(int(sys.argv[1]))
        after = time.process_time()
        print(f"loss {loss:.4f}")
        if os.environ.get("TD_BENCH_SEGMENTS"):  # process CPU time when training starts and ends
            with open(os.environ["TD_BENCH_SEGMENTS"], "w") as fh:
                fh.write(f"{before} {after}\\n")
    '''
)

STARTUP = "import torch\n"


#: glibc settings of ``--fixed-heap``: mmap threshold at its maximum (32 MiB) and no heap trimming
#: below 1 GiB, so large freed blocks are reused instead of unmapped and faulted in again.
FIXED_HEAP = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"


#: torch's switch for 2 MiB-aligned, ``madvise(MADV_HUGEPAGE)`` CPU allocations (``--huge-pages``).
HUGE_PAGES = ("THP_MEM_ALLOC_ENABLE", "1")


def _env(fixed_heap: bool = False, huge_pages: bool = False) -> dict[str, str]:
    """The children's environment: this source tree first, one OpenMP thread."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SRC), env.get("PYTHONPATH")) if p)
    env["OMP_NUM_THREADS"] = "1"
    if fixed_heap:
        env["GLIBC_TUNABLES"] = FIXED_HEAP
    if huge_pages:
        env[HUGE_PAGES[0]] = HUGE_PAGES[1]
    return env


def _child_times(
    cmd: list[str], cwd: str, env: dict[str, str]
) -> tuple[float, float, tuple[float, float, float] | None]:
    """(wall seconds, CPU seconds user+sys, CPU split) of one child process.

    The split is (until training starts, training, after training) in CPU seconds when the child
    is the benchmark loop, which writes its process CPU time at the start and end of training to
    the file named by ``TD_BENCH_SEGMENTS``; None for other scripts.
    """
    marks = os.path.join(cwd, "segments.txt")
    if os.path.exists(marks):
        os.remove(marks)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(
        cmd,
        cwd=cwd,
        env=dict(env, TD_BENCH_SEGMENTS=marks),
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, _split(marks, cpu)


def _split(marks: str, cpu: float) -> tuple[float, float, float] | None:
    """(until training, training, after training) from the loop's marks and the child's CPU."""
    try:
        with open(marks) as fh:
            start, end = (float(v) for v in fh.read().split())
    except (OSError, ValueError):
        return None
    return start, end - start, cpu - end


#: The parts of the whole process that ``_split`` separates, as printed.
SEGMENTS = (
    "until training starts (interpreter, doctor start-up, import torch)",
    "training (the script's main())",
    "after training (report, exit)",
)


def _pairs(
    plain: list[str], watched: list[str], pairs: int, cwd: str, env: dict[str, str], loaded: list[str] | None = None
) -> dict[str, list]:
    """Interleaved runs of ``plain`` and ``watched`` (and ``loaded``: a third side); the order
    rotates every round, so with two sides it alternates."""
    sides = [("plain", plain), ("td", watched)] + ([("loaded", loaded)] if loaded else [])
    out: dict[str, list] = {f"{n}_{k}": [] for n, _ in sides for k in ("wall", "cpu", "split")}
    for _, cmd in sides:
        _child_times(cmd, cwd, env)  # warm the page cache and the bytecode
    for i in range(pairs):
        shift = i % len(sides)
        for name, cmd in sides[shift:] + sides[:shift]:
            wall, cpu, split = _child_times(cmd, cwd, env)
            out[f"{name}_wall"].append(wall)
            out[f"{name}_cpu"].append(cpu)
            out[f"{name}_split"].append(split)
    return out


#: ``--loaded``: the doctor imported, one session started and stopped (probes installed and
#: removed, monitors created), then the script run *unwatched*, the way ``traindoctor run`` runs it.
#: Against ``python loop.py`` this is the cost of loading the doctor into the process; against
#: ``traindoctor run`` it is the cost of watching.
LOADED = textwrap.dedent(
    """
    import runpy, sys
    from traindoctor.doctor.watch import doctor_session
    session = doctor_session()
    session.start()
    session.stop()
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
    """
)


def _thp_mode() -> str:
    """The kernel's transparent-huge-page mode (``madvise`` or ``always`` lets torch use them)."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return "unknown"
    chosen = [w.strip("[]") for w in text.split() if w.startswith("[")]
    return chosen[0] if chosen else text.strip()


def _ratio(series: dict[str, list[float]], kind: str) -> float:
    return statistics.median(t / p for t, p in zip(series[f"td_{kind}"], series[f"plain_{kind}"]))


def _diff_ms(series: dict[str, list[float]], kind: str) -> float:
    return 1000 * statistics.median(t - p for t, p in zip(series[f"td_{kind}"], series[f"plain_{kind}"]))


#: Two-sided 95% quantiles of Student's t for 1..30 degrees of freedom (then the normal 1.96).
_T95 = (
    12.71,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
)


def mean_ci(diffs: list[float]) -> tuple[float, float]:
    """Mean of the per-pair differences and the half-width of its 95% confidence interval."""
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return mean, float("nan")
    df = len(diffs) - 1
    t = _T95[df - 1] if df <= len(_T95) else 1.96
    return mean, t * statistics.stdev(diffs) / len(diffs) ** 0.5


def per_step_cost(steps: int, rounds: int, width: int) -> tuple[float, float, float]:
    """(unwatched CPU ms/step, watched CPU ms/step, median added us/step), in this process."""
    import torch

    import traindoctor

    namespace: dict[str, object] = {"__name__": "bench_loop"}
    exec(compile(LOOP.replace("WIDTH", str(width)), "bench_loop.py", "exec"), namespace)
    loop = namespace["main"]
    torch.set_num_threads(1)
    loop(20)  # warm up allocator and lazy init
    with traindoctor.watch():
        loop(5)  # import the doctor's modules outside the timed runs
    plain: list[float] = []
    watched: list[float] = []
    for i in range(rounds):
        for mode in ("plain", "watched") if i % 2 == 0 else ("watched", "plain"):
            if mode == "watched":
                with traindoctor.watch():  # start/stop are start-up costs, measured above
                    t0 = time.thread_time()
                    loop(steps)  # type: ignore[operator]
                    watched.append((time.thread_time() - t0) / steps)
            else:
                t0 = time.thread_time()
                loop(steps)  # type: ignore[operator]
                plain.append((time.thread_time() - t0) / steps)
    added = statistics.median(w - p for w, p in zip(watched, plain))
    return statistics.median(plain) * 1000, statistics.median(watched) * 1000, added * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=16, help="interleaved process pairs")
    parser.add_argument("--steps", type=int, default=200, help="training steps per process")
    parser.add_argument("--width", type=int, default=896, help="MLP width (~15 ms CPU steps at 896)")
    parser.add_argument("--step-rounds", type=int, default=8, help="in-process rounds for per-step")
    parser.add_argument("--quick", action="store_true", help="3 pairs, 60 steps (a smoke run)")
    parser.add_argument(
        "--fixed-heap", action="store_true", help="run both sides with glibc's heap thresholds fixed (less spread)"
    )
    parser.add_argument(
        "--huge-pages", action="store_true", help="run both sides with torch's huge-page CPU allocations (less spread)"
    )
    parser.add_argument(
        "--whole-only", action="store_true", help="only the whole-process pairs (no start-up pairs, no per-step rounds)"
    )
    parser.add_argument("--raw", metavar="FILE", help="also write every pair's times as JSON")
    parser.add_argument(
        "--loaded", action="store_true", help="a third side: the doctor loaded, the script run unwatched"
    )
    parser.add_argument("--per-step-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.per_step_child:  # in a child process, so that --fixed-heap applies to it too
        print(json.dumps(per_step_cost(args.steps, args.step_rounds, args.width)))
        return 0
    env = _env(args.fixed_heap, args.huge_pages)
    if args.quick:
        args.pairs, args.steps, args.step_rounds = 3, 60, 4

    compiled = compileall.compile_dir(str(SRC / "traindoctor"), quiet=1)
    no_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="td-overhead-") as tmp:
        Path(tmp, "loop.py").write_text(LOOP.replace("WIDTH", str(args.width)))
        Path(tmp, "startup.py").write_text(STARTUP)
        Path(tmp, "loaded.py").write_text(LOADED)
        py, td = [sys.executable], [sys.executable, "-m", "traindoctor", "run"]
        whole = _pairs(
            py + ["loop.py", str(args.steps)],
            td + ["loop.py", str(args.steps)],
            args.pairs,
            tmp,
            env,
            loaded=py + ["loaded.py", "loop.py", str(args.steps)] if args.loaded else None,
        )
        start = None if args.whole_only else _pairs(py + ["startup.py"], td + ["startup.py"], args.pairs, tmp, env)
    per_step = None
    if not args.whole_only:
        child = subprocess.run(
            [
                sys.executable,
                __file__,
                "--per-step-child",
                "--steps",
                str(args.steps),
                "--step-rounds",
                str(args.step_rounds),
                "--width",
                str(args.width),
            ],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        per_step = tuple(json.loads(child.stdout.strip().splitlines()[-1]))
    elapsed = time.perf_counter() - started
    if args.raw:
        Path(args.raw).write_text(json.dumps({"whole": whole, "start": start, "per_step": per_step}))

    import torch

    print(
        f"Runtime overhead: {args.pairs} interleaved pairs; loop of {args.steps} steps, width "
        f"{args.width}, 1 thread; torch {torch.__version__}; Python {sys.version.split()[0]}; "
        f"load average {load:.1f} at start; {elapsed:.0f} s"
    )
    if args.fixed_heap:
        print(f"heap: GLIBC_TUNABLES={FIXED_HEAP} for both sides (--fixed-heap)")
    if args.huge_pages:
        print(
            f"tensors: {HUGE_PAGES[0]}={HUGE_PAGES[1]} for both sides (--huge-pages; transparent "
            f"huge pages: {_thp_mode()})"
        )
    if no_bytecode:
        print(
            "note: PYTHONDONTWRITEBYTECODE is set; bytecode was compiled up front "
            f"(compileall ok={bool(compiled)}), as a pip install does"
        )
    print()
    print("| measurement | python | traindoctor run | ratio / added |")
    print("|---|---:|---:|---:|")
    for label, series in (("whole process, wall (s)", whole), ("start-up only, wall (s)", start)):
        if series is not None:
            print(
                f"| {label} | {statistics.median(series['plain_wall']):.3f} | "
                f"{statistics.median(series['td_wall']):.3f} | {_ratio(series, 'wall'):.3f}x |"
            )
    for label, series in (("whole process, CPU (s)", whole), ("start-up only, CPU (s)", start)):
        if series is not None:
            print(
                f"| {label} | {statistics.median(series['plain_cpu']):.3f} | "
                f"{statistics.median(series['td_cpu']):.3f} | {_ratio(series, 'cpu'):.3f}x |"
            )
    cpu_diffs = [t - p for t, p in zip(whole["td_cpu"], whole["plain_cpu"])]
    mean, half = mean_ci(cpu_diffs)
    base = statistics.fmean(whole["plain_cpu"])
    print(
        f"| whole process, CPU, mean added (95% CI) | {base:.3f} | | {1000 * mean:.0f} ms "
        f"+- {1000 * half:.0f} ms = {1 + mean / base:.3f}x "
        f"({1 + (mean - half) / base:.3f}-{1 + (mean + half) / base:.3f}) |"
    )
    # (label, baseline side, compared side): the whole comparison, and with --loaded its two halves
    comparisons = [("traindoctor run vs python", "plain", "td")]
    if args.loaded:
        comparisons += [
            ("doctor loaded, script unwatched, vs python", "plain", "loaded"),
            ("traindoctor run vs doctor loaded (the watching)", "loaded", "td"),
        ]
    for label, a, b in comparisons[1:]:  # the whole comparison's row is printed above
        m, h = mean_ci([y - x for x, y in zip(whole[f"{a}_cpu"], whole[f"{b}_cpu"])])
        print(f"| {label}, CPU, mean added (95% CI) | | | {1000 * m:.0f} ms +- {1000 * h:.0f} ms |")
    for label, a, b in comparisons:
        if not (all(whole[f"{a}_split"]) and all(whole[f"{b}_split"])):
            continue
        for i, segment in enumerate(SEGMENTS):
            m, h = mean_ci([y[i] - x[i] for x, y in zip(whole[f"{a}_split"], whole[f"{b}_split"])])
            base_i = statistics.fmean(x[i] for x in whole[f"{a}_split"])
            print(
                f"| split ({label}): {segment}, CPU, mean added (95% CI) | {base_i:.3f} | | "
                f"{1000 * m:.0f} ms +- {1000 * h:.0f} ms |"
            )
    if start is not None:
        print(f"| start-up added, CPU (ms) | | | {_diff_ms(start, 'cpu'):.0f} ms |")
    if per_step is not None:
        plain_ms, watched_ms, added_us = per_step
        print(f"| per step, CPU (ms), in-process | {plain_ms:.2f} | {watched_ms:.2f} | {added_us:.0f} us/step |")
    print()
    print(
        "Ratios and differences are medians over pairs of (traindoctor run / python) in the same "
        "pair. CPU = user + sys time of the child process (whole process, start-up) or "
        "time.thread_time() of the training thread (per step, which includes each epoch's "
        "DataLoader construction and iter()). Targets: whole process <= 1.03x, <= 100 us/step."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
