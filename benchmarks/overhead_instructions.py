"""The runtime doctor's cost in CPU instructions (valgrind/callgrind): exact on a busy machine.

Timing the doctor's per-step cost (tens of microseconds in ~11 ms steps) needs a quiet machine:
on a shared one the noise between two runs is larger than the cost. Instruction counts do not
depend on load, so this script gives numbers that can be compared between commits anywhere:

* **per step**: the benchmark loop of ``runtime_overhead.py`` (same model, loader and optimizer;
  ``--width 64`` by default so valgrind is fast, the doctor's per-step work does not depend on
  the width) run for ``--short`` and ``--long`` steps, unwatched and under ``traindoctor.watch()``;
  ``(watched_long - watched_short) - (plain_long - plain_short)`` divided by the extra steps is
  the doctor's instructions per training step, start-up and report excluded.
* **start-up** (``--startup``): ``python startup.py`` (``import torch``) against
  ``traindoctor run startup.py``: imports, probes, report. (The ``uname`` child that
  ``platform.platform()`` used to start is a separate process and not counted here.)

To turn instructions into time, the plain loop's own instructions per step and its measured step
time are printed: at the same instructions per second, ``added_instructions / plain_instructions
x plain_step_time`` estimates the added time per step. That estimate is a *lower bound*: the
doctor's work is Python bytecode, which runs fewer instructions per second than torch's kernels
(188,787 instructions estimated 22 us per step; the same loop at width 64 timed in-process under
``--fixed-heap``-like conditions added about 60 us). Use it to compare commits, not as a time.

    python benchmarks/overhead_instructions.py [--width 64] [--short 32] [--long 160] [--startup]

Needs ``valgrind`` on PATH; takes a few minutes (valgrind runs Python ~50x slower).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import runtime_overhead as ro

DRIVER = textwrap.dedent(
    """
    import os, sys
    import torch
    steps, mode = int(sys.argv[1]), sys.argv[2]
    namespace = {"__name__": "bench_loop"}
    exec(compile(open("loop.py").read(), "loop.py", "exec"), namespace)
    torch.set_num_threads(1)
    import traindoctor
    if mode == "plain":
        namespace["main"](steps)
    else:
        # The host-work sampler thread only starts when the loop's own host work is a large share
        # of a step (not on the benchmark loop at its real width); keep it out of the count.
        with traindoctor.watch(thresholds={"profile.sample_host_work": False}):
            namespace["main"](steps)
    """
)


def _instructions(cmd: list[str], cwd: str) -> int:
    env = dict(os.environ, PYTHONHASHSEED="0", OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ro.SRC), env.get("PYTHONPATH")) if p)
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    match = re.search(r"refs:\s+([\d,]+)", out.stderr)
    if not match:
        raise RuntimeError(f"no instruction count in valgrind's output:\n{out.stderr[-2000:]}")
    return int(match.group(1).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--short", type=int, default=32)
    parser.add_argument("--long", type=int, default=160)
    parser.add_argument("--startup", action="store_true", help="also count the start-up")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: nothing to count (apt-get install valgrind)")
        return 0
    import compileall

    compileall.compile_dir(str(ro.SRC / "traindoctor"), quiet=1)
    with tempfile.TemporaryDirectory(prefix="td-instr-") as tmp:
        Path(tmp, "loop.py").write_text(ro.LOOP.replace("WIDTH", str(args.width)))
        Path(tmp, "driver.py").write_text(DRIVER)
        Path(tmp, "startup.py").write_text(ro.STARTUP)
        py = sys.executable
        counts = {
            (mode, n): _instructions([py, "driver.py", str(n), mode], tmp)
            for mode in ("plain", "watched")
            for n in (args.short, args.long)
        }
        extra = args.long - args.short
        plain = (counts["plain", args.long] - counts["plain", args.short]) / extra
        watched = (counts["watched", args.long] - counts["watched", args.short]) / extra
        startup = None
        if args.startup:
            startup = _instructions([py, "-m", "traindoctor", "run", "startup.py"], tmp) - _instructions(
                [py, "startup.py"], tmp
            )
        # The plain loop's native step time, to turn instructions into microseconds.
        proc = subprocess.run(
            [
                py,
                "-c",
                "import time, runpy, sys; sys.argv = ['loop.py', '1'];"
                "ns = runpy.run_path('loop.py'); import torch;"
                "torch.set_num_threads(1); ns['main'](20);"
                f"t = time.thread_time(); ns['main']({args.long});"
                f"print((time.thread_time() - t) / {args.long})",
            ],
            cwd=tmp,
            capture_output=True,
            text=True,
            check=True,
        )
        step_s = float(proc.stdout.strip().splitlines()[-1])
    added = watched - plain
    print(
        f"Doctor cost in instructions (callgrind), loop width {args.width}, steps "
        f"{args.short} vs {args.long}; load average {os.getloadavg()[0]:.1f}; "
        f"{time.strftime('%Y-%m-%d %H:%M')}"
    )
    print(f"| plain loop, instructions per step | {plain:,.0f} |")
    print(f"| added by the doctor per step | {added:,.0f} ({100 * added / plain:.1f}%) |")
    print(f"| plain step time here (CPU) | {step_s * 1e3:.3f} ms |")
    print(
        f"| added per step, lower bound at the loop's instructions per second | {added / plain * step_s * 1e6:.0f} us |"
    )
    if startup is not None:
        print(f"| start-up + report added | {startup:,.0f} instructions |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
