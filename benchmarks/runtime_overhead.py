"""Runtime doctor overhead: the same CPU training loop unwatched, watched, and under torch.profiler.

Runs the three modes interleaved (round-robin, the order rotating every round, so drift in machine
load hits all modes alike), takes the median step time of each run after its warm-up steps, then
the median over rounds, and prints a markdown table of step times and ratios to the unwatched loop.
Target: watched / unwatched <= 1.03, well below the profiler's ratio.

    python benchmarks/runtime_overhead.py [--rounds 9] [--steps 25] [--threads 1]

Runs in well under two minutes on a laptop CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from typing import Callable, Iterator

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import traindoctor  # noqa: E402

WARMUP_STEPS = 3


def _model(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU(), nn.Dropout(0.1)]
    return nn.Sequential(*layers, nn.Linear(width, 10))


def _loop(steps: int, width: int, depth: int, batch: int) -> tuple[list[float], list[float]]:
    """One training run; per-step wall and CPU (this thread) seconds: fetch, forward, backward,
    optimizer step."""
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(batch * 8, width), torch.randint(0, 10, (batch * 8,)))
    loader = DataLoader(data, batch_size=batch, shuffle=True, drop_last=True)
    model = _model(width, depth)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    wall: list[float] = []
    cpu: list[float] = []
    while len(wall) < steps:
        it = iter(loader)
        while len(wall) < steps:
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                x, y = next(it)
            except StopIteration:
                break
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss.item()
            wall.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
    return wall, cpu


@contextlib.contextmanager
def _unwatched() -> Iterator[None]:
    yield


@contextlib.contextmanager
def _watched() -> Iterator[None]:
    with traindoctor.watch():
        yield


@contextlib.contextmanager
def _profiled() -> Iterator[None]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]):
        yield


MODES: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "unwatched": _unwatched,
    "traindoctor watch": _watched,
    "torch.profiler": _profiled,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--steps", type=int, default=25, help="steps per run (after 3 warm-up)")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    names = list(MODES)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    shape = (args.width, args.depth, args.batch)
    started = time.perf_counter()
    _loop(5, *shape)  # warm the process (allocator, lazy init)
    with traindoctor.watch():  # import the doctor's modules outside the timed runs
        pass
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            with MODES[name]():
                w, c = _loop(args.steps + WARMUP_STEPS, *shape)
            wall[name].append(statistics.median(w[WARMUP_STEPS:]))
            cpu[name].append(statistics.median(c[WARMUP_STEPS:]))
    elapsed = time.perf_counter() - started

    def ratio(series: dict[str, list[float]], name: str) -> float:
        # Paired per round (same machine load), then the median over rounds.
        return statistics.median(m / b for m, b in zip(series[name], series["unwatched"]))

    print(f"Runtime overhead: {args.rounds} interleaved rounds x {args.steps} steps; MLP width "
          f"{args.width}, depth {args.depth}, batch {args.batch}; {args.threads} thread(s); "
          f"torch {torch.__version__}; {elapsed:.0f} s")
    print()
    print("| mode | median step, wall (ms) | wall ratio | median step, CPU (ms) | CPU ratio |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        mw, mc = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"| {name} | {mw * 1000:.2f} | {ratio(wall, name):.3f} | {mc * 1000:.2f} | "
              f"{ratio(cpu, name):.3f} |")
    print()
    print("Ratios are medians over rounds of (mode / unwatched) in the same round. CPU = "
          "time.thread_time() of the training thread: the doctor's overhead is CPU work, and this "
          "clock ignores time spent waiting for a core on a busy machine.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
