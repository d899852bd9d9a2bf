"""Validate traindoctor's GPU paths in one run on one NVIDIA GPU (under 5 minutes on an H200).

    make gpu-check
    python benchmarks/gpu_check.py [--json gpu_check.json] [--markdown gpu_check.md] [--allow-cpu]

It needs torch's CUDA wheel. In this repository's virtual environment (which pins a CPU wheel),
install the CUDA build of the same torch version first:

    .venv/bin/pip install --force-reinstall --no-deps --index-url https://download.pytorch.org/whl/cu128 \
        "torch==$(.venv/bin/python -c 'import torch; print(torch.__version__.split("+")[0])')"

Without CUDA (no GPU, or a CPU wheel on a GPU machine) it says so and exits 2: a CPU wheel must
never report green. ``--allow-cpu`` runs the same workloads on the CPU, smaller (a rehearsal of
the script itself: no GPU-only finding may fire there, and the device-time rows only check that
nothing breaks).

Every row has a criterion that can fail. What runs:

* **the device-time profile** on workloads whose bottleneck is known by construction: a
  compute-bound loop (large bf16 matmuls, data already on the GPU), large pageable batches copied
  each step and the same batches pinned with ``non_blocking=True`` (both transfer-bound; the
  pinned copy at least 1.5x faster in device time), a data-bound loop (a slow ``__getitem__``), a
  loop with ``loss.item()`` and host work every step (sync-bound, one sync per step), a host-bound
  loop of many tiny kernels, and an fp32 GEMM loop with TF32 off against on (TD309's premise:
  TF32 at least 2x faster on capability >= 8.0);
* **TD801 and TD309 on those workloads**: TD801 fires on the sync-per-step loop (one sync per
  step at the loop's ``loss.item()``, at least half the GPU's step time idle after it) and not
  on the compute-bound loop with a ``loss.item()`` per step; TD309 fires on the float32 GEMM loop
  with precision ``"highest"`` on capability >= 8.0 (fp32 share at least 0.5, the device's peak
  known) and not with ``"high"``;
* **TD201's premise**: a timed bf16 GEMM (4096 x 4096 weights) at batch 30, 32 and 64: per sample,
  30 must be measurably slower than 32 for the rule's advice to hold on this GPU;
* **the doctor's whole-process overhead** on a GPU loop: ``python loop.py`` against
  ``traindoctor run loop.py``, interleaved pairs, median wall-time ratio at most 1.05;
* the rules on real CUDA tensors: TD101 (pageable vs pinned copy bandwidth; pin-memory-off),
  TD201/TD306 under fp16/bf16 autocast, TD301/TD302, TD401/TD402 from 20-30 conv training steps,
  verify-resume's GPU tolerance, tune's pinned candidates, the framework twins when installed.

It writes a JSON file and a markdown table, and exits 1 when a row failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_check_core import (  # noqa: E402
    CPU_WHEEL,
    FRAMEWORK_SCRIPTS,
    NEEDS_GPU,
    Context,
    Result,
    _codes,
    _cudnn_benchmark,
    _evidence,
    _sync,
    _timed,
    _watch,
)
from gpu_check_profile import (  # noqa: E402
    check_gemm_premise,
    check_mfu,
    check_profile,
    check_td801_td309,
)


# ---------------------------------------------------------------------------- workloads
def copy_bandwidth(ctx: Context, megabytes: int = 64, repeats: int = 5) -> dict[str, float]:
    """Host-to-device copy bandwidth (GB/s) from pageable and from pinned memory."""
    import torch

    out: dict[str, float] = {}
    for pinned in (False, True):
        host = torch.empty(megabytes * 2**20, dtype=torch.uint8, pin_memory=pinned and ctx.gpu)
        host.to(ctx.device, non_blocking=pinned)
        _sync(ctx)
        start = time.perf_counter()
        for _ in range(repeats):
            host.to(ctx.device, non_blocking=pinned)
        _sync(ctx)
        seconds = (time.perf_counter() - start) / repeats
        out["pinned_GBps" if pinned else "pageable_GBps"] = megabytes * 2**20 / seconds / 1e9
    return out


def image_loop(
    ctx: Context, *, pin_memory: bool, batches: int = 16, batch: int = 64, shapes: list[int] | None = None
) -> None:
    """A small conv net trained on image batches copied from a DataLoader to ``ctx.device``."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(16, 10),
    ).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    side = 48
    if ctx.small:
        batches, batch, side = min(batches, 6), min(batch, 16), 24
        shapes = [max(8, s // 2) for s in shapes[:8]] if shapes is not None else None
    if shapes is None:
        data = TensorDataset(torch.randn(batches * batch, 3, side, side), torch.randint(0, 10, (batches * batch,)))
        loader = DataLoader(data, batch_size=batch, shuffle=True, pin_memory=pin_memory and ctx.gpu)
        items = iter(loader)
    else:  # varying spatial sizes (no DataLoader needed)
        items = iter([(torch.randn(batch, 3, s, s), torch.randint(0, 10, (batch,))) for s in shapes])
    for x, y in items:
        x, y = x.to(ctx.device, non_blocking=pin_memory), y.to(ctx.device, non_blocking=pin_memory)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    _sync(ctx)


def linear_loop(
    ctx: Context, *, batch: int, dtype: str | None, scaler: bool, clip: str | None = None, steps: int = 12
) -> None:
    """An MLP under autocast ``dtype`` (None: float32), with or without a GradScaler.

    ``clip``: "before" clips while the gradients are still scaled (TD302), "after" unscales first.
    """
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10)).to(ctx.device)
    opt = torch.optim.AdamW(
        [
            {"params": [p for p in model.parameters() if p.ndim > 1], "weight_decay": 0.01},
            {"params": [p for p in model.parameters() if p.ndim <= 1], "weight_decay": 0.0},
        ],
        lr=1e-3,
    )
    grad_scaler = torch.amp.GradScaler(ctx.device) if scaler else None
    cast = getattr(torch, dtype) if dtype else None
    for _ in range(steps):
        x = torch.randn(batch, 256, device=ctx.device)
        y = torch.randint(0, 10, (batch,), device=ctx.device)
        region = torch.autocast(ctx.device, dtype=cast) if cast is not None else contextlib.nullcontext()
        with region:
            loss = nn.functional.cross_entropy(model(x), y) * 1e-6  # small: fp16 gradients underflow
        opt.zero_grad()
        if grad_scaler is not None:
            grad_scaler.scale(loss).backward()
            if clip == "after":
                grad_scaler.unscale_(opt)
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            grad_scaler.step(opt)
            grad_scaler.update()
        else:
            loss.backward()
            opt.step()
    _sync(ctx)


RESUME_SCRIPT = textwrap.dedent(
    '''
    """A tiny CUDA training script that checkpoints with traindoctor.checkpoint (gpu_check)."""
    import argparse

    import torch
    from torch.utils.data import TensorDataset

    from traindoctor import checkpoint

    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--ckpt", default="ckpt.pt")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()

    torch.manual_seed(0)
    X = torch.randn(64, 32)
    Y = X @ torch.randn(32, 1)
    loader = checkpoint.ResumableLoader(TensorDataset(X, Y), batch_size=8, shuffle=True, seed=1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(64, 1)).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
    step = 0
    if args.resume:
        step = checkpoint.load(args.ckpt, model=model, optimizer=optimizer, scheduler=scheduler,
                               loader=loader).step
    while step < args.steps:
        for x, y in loader:
            x, y = x.to(args.device), y.to(args.device)
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % 3 == 0:
                checkpoint.save(args.ckpt, model=model, optimizer=optimizer, scheduler=scheduler,
                                loader=loader, step=step, epoch=loader.epoch)
            if step >= args.steps:
                break
    '''
)


def _python_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    return env


def verify_resume(ctx: Context, timeout_s: float = 120.0) -> dict[str, Any]:
    """``traindoctor verify-resume`` on :data:`RESUME_SCRIPT` on ``ctx.device``: the JSON verdict."""
    script = ctx.workdir / "resume_cuda.py"
    script.write_text(RESUME_SCRIPT)
    cmd = [
        sys.executable,
        "-m",
        "traindoctor",
        "verify-resume",
        str(script),
        "--device",
        ctx.device,
        "--resume-args",
        "--resume",
        "--steps",
        "12",
        "--interrupt-at",
        "7",
        "--output-format",
        "json",
    ]
    proc = subprocess.run(cmd, cwd=ctx.workdir, env=_python_env(), capture_output=True, text=True, timeout=timeout_s)
    try:
        verdict = json.loads(proc.stdout)
    except ValueError:
        raise RuntimeError(f"verify-resume exited {proc.returncode}: {proc.stderr.strip()[-400:]}") from None
    verdict["exit_code"] = proc.returncode
    return verdict


def tune_pinned(ctx: Context) -> Any:
    """``tune_loader`` with ``pin_memory`` candidates (only measured when batches go to CUDA)."""
    import torch
    from torch.utils.data import TensorDataset

    from traindoctor.tune.measure import Candidate, tune_loader

    n, side = (256, 32) if ctx.small else (1024, 96)
    data = TensorDataset(torch.randint(0, 255, (n, 3, side, side), dtype=torch.uint8), torch.randint(0, 10, (n,)))
    candidates = [
        Candidate(0),
        Candidate(0, pin_memory=True),
        Candidate(2, 2, persistent_workers=True),
        Candidate(2, 2, persistent_workers=True, pin_memory=True),
    ]
    return tune_loader(
        data,
        batch_size=32 if ctx.small else 64,
        candidates=candidates,
        batches=6 if ctx.small else 12,
        warmup_batches=2,
        time_budget_s=8.0,
        device=ctx.device,
        max_workers=2,
    )


def framework_run(ctx: Context, script: str, args: list[str], timeout_s: float = 180.0) -> dict[str, Any]:
    """A healthy framework script under ``traindoctor run`` (``--gpu`` on CUDA): the JSON report."""
    report = ctx.workdir / f"{Path(script).stem}-report.json"
    out = ctx.workdir / Path(script).stem
    out.mkdir(exist_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "traindoctor",
        "run",
        "--output-format",
        "json",
        "-o",
        str(report),
        str(FRAMEWORK_SCRIPTS / script),
        *args,
        "--out",
        str(out),
    ]
    if ctx.gpu:
        cmd.append("--gpu")
    proc = subprocess.run(cmd, cwd=ctx.workdir, env=_python_env(), capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0 or not report.exists():
        raise RuntimeError(f"{script} exited {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return json.loads(report.read_text())


def check_td101(ctx: Context) -> list[Result]:
    results = [
        _timed(
            "H2D copy bandwidth",
            "64 MiB x5",
            [],
            lambda: ([], copy_bandwidth(ctx)),
            # pinned memory is a single DMA transfer: clearly faster than pageable's staged copy
            passed=lambda _o, n: not ctx.gpu or n["pinned_GBps"] >= 1.5 * n["pageable_GBps"],
        )
    ]
    for pin in (False, True):

        def body(pin: bool = pin) -> tuple[list[str], dict[str, Any]]:
            doctor = _watch(["TD101"], lambda: image_loop(ctx, pin_memory=pin))
            ev = _evidence(doctor, "TD101")
            profile = doctor.profile.to_dict()
            numbers = {k: ev[k] for k in list(ev)[:3]}
            numbers["profile_transfer_share"] = (profile.get("shares") or {}).get("transfer")
            numbers["verdict"] = profile.get("verdict")
            return _codes(doctor), numbers

        results.append(_timed("TD101 pin-memory-off", f"pin_memory={pin}", [] if pin else ctx.expect("TD101"), body))
    return results


def check_td201_td306(ctx: Context) -> list[Result]:
    results = []
    bf16 = ctx.bf16_capable or not ctx.gpu
    variants: list[tuple[str, int, str | None, list[str]]] = [
        ("fp16 autocast, batch 30", 30, "float16", ctx.expect("TD201", *(["TD306"] if ctx.bf16_capable else []))),
        ("fp32, batch 30", 30, None, []),
        ("fp16 autocast, batch 32", 32, "float16", ctx.expect(*(["TD306"] if ctx.bf16_capable else []))),
    ]
    if bf16:
        variants.insert(1, ("bf16 autocast, batch 30", 30, "bfloat16", ctx.expect("TD201")))
    for name, batch, dtype, expected in variants:

        def body(batch: int = batch, dtype: str | None = dtype) -> tuple[list[str], dict[str, Any]]:
            doctor = _watch(
                ["TD201", "TD306"], lambda: linear_loop(ctx, batch=batch, dtype=dtype, scaler=dtype == "float16")
            )
            return _codes(doctor), {"batch": batch}

        results.append(_timed("TD201/TD306 autocast", name, expected, body))
    return results


def check_td301_td302(ctx: Context) -> list[Result]:
    results = []
    for name, scaler, clip, expected in [
        ("fp16, no GradScaler", False, None, ctx.expect("TD301", gpu_only=False)),
        ("fp16, clip before unscale_", True, "before", ["TD302"]),
        ("fp16, unscale_ then clip", True, "after", []),
    ]:

        def body(scaler: bool = scaler, clip: str | None = clip) -> tuple[list[str], dict[str, Any]]:
            doctor = _watch(
                ["TD301", "TD302"], lambda: linear_loop(ctx, batch=32, dtype="float16", scaler=scaler, clip=clip)
            )
            return _codes(doctor), {
                k: v for k, v in _evidence(doctor, "TD301").items() if k in ("zero_grad_fraction", "autocast_dtype")
            }

        results.append(_timed("TD301/TD302 scaler", name, expected, body))
    return results


def check_td401_td402(ctx: Context) -> list[Result]:
    results = []
    for name, bench, shapes, expected in [
        ("benchmark off, fixed shapes", False, [32] * 20, ctx.expect("TD401")),
        ("benchmark on, varying shapes", True, [16 + 4 * (i % 10) for i in range(30)], ctx.expect("TD402")),
        ("benchmark on, fixed shapes", True, [32] * 20, []),
    ]:

        def body(bench: bool = bench, shapes: list[int] = shapes) -> tuple[list[str], dict[str, Any]]:
            with _cudnn_benchmark(bench):
                start = time.perf_counter()
                doctor = _watch(["TD401", "TD402"], lambda: image_loop(ctx, pin_memory=False, batch=16, shapes=shapes))
                seconds = time.perf_counter() - start
            ev = _evidence(doctor, "TD402")
            numbers = {"loop_s": seconds}
            if "distinct_shapes" in ev:
                numbers["distinct_shapes"] = ev["distinct_shapes"]
            return _codes(doctor), numbers

        results.append(_timed("TD401/TD402 cudnn", name, expected, body))
    return results


OVERHEAD_LOOP = """
import sys, time, torch
from torch import nn
dev = "cuda" if torch.cuda.is_available() else "cpu"
steps, width = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(width, width) for _ in range(4)]).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randn(256, width, device=dev)
for step in range(steps):
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if step % 50 == 0:
        print(step, float(loss))
if dev == "cuda":
    torch.cuda.synchronize()
"""


def check_overhead(ctx: Context) -> list[Result]:
    """The doctor's whole-process cost on a GPU loop: interleaved pairs, median wall ratio."""
    import statistics

    def body() -> tuple[list[str], dict[str, Any]]:
        script = ctx.workdir / "overhead_loop.py"
        script.write_text(OVERHEAD_LOOP)
        steps, width, pairs = ("30", "64", 1) if ctx.small else ("600", "2048", 3)
        plain_cmd = [sys.executable, str(script), steps, width]
        run_cmd = [
            sys.executable,
            "-m",
            "traindoctor",
            "run",
            "--output-format",
            "json",
            "-o",
            str(ctx.workdir / "ov.json"),
            str(script),
            steps,
            width,
        ]
        ratios, plain_s, run_s = [], [], []
        for i in range(pairs):
            times = {}
            for name, cmd in (
                (("plain", plain_cmd), ("run", run_cmd)) if i % 2 == 0 else (("run", run_cmd), ("plain", plain_cmd))
            ):
                start = time.perf_counter()
                subprocess.run(cmd, cwd=ctx.workdir, env=_python_env(), check=True, capture_output=True, timeout=300)
                times[name] = time.perf_counter() - start
            ratios.append(times["run"] / times["plain"])
            plain_s.append(times["plain"])
            run_s.append(times["run"])
        ratio = statistics.median(ratios)
        return ["measured"], {
            "pairs": pairs,
            "plain_s": round(statistics.median(plain_s), 2),
            "run_s": round(statistics.median(run_s), 2),
            "ratio": round(ratio, 3),
        }

    limit = 1.05 if ctx.gpu else 3.0
    return [
        _timed(
            "doctor overhead, whole process",
            "python loop.py vs traindoctor run loop.py",
            ["measured"],
            body,
            passed=lambda o, n: o == ["measured"] and n["ratio"] <= limit,
        )
    ]


def check_verify_resume(ctx: Context) -> list[Result]:
    from traindoctor.resume.cli import DEFAULT_GPU_TOLERANCE

    tolerance = DEFAULT_GPU_TOLERANCE if ctx.gpu else 0.0

    def body() -> tuple[list[str], dict[str, Any]]:
        verdict = verify_resume(ctx)
        numbers = {
            "exit_code": verdict["exit_code"],
            "exact": verdict.get("exact"),
            "tolerance": verdict.get("tolerance"),
        }
        return (["exact"] if verdict.get("exact") else ["not exact"]), numbers

    return [
        _timed(
            "verify-resume",
            f"tolerance {tolerance:g}",
            ["exact"],
            body,
            passed=lambda o, n: o == ["exact"] and n["tolerance"] == tolerance,
        )
    ]


def check_tune(ctx: Context) -> list[Result]:
    def body() -> tuple[list[str], dict[str, Any]]:
        result = tune_pinned(ctx)
        rates = {m.candidate.label(): m.batches_per_s for m in result.measurements if m.error is None}
        pinned = sorted(label for label in rates if "pin_memory=True" in label)
        numbers: dict[str, Any] = {f"{label.replace(' ', '')} batches/s": rate for label, rate in rates.items()}
        numbers["recommended"] = result.recommended
        return (["pinned measured"] if pinned else ["no pinned"]), numbers

    expected = ["pinned measured"] if ctx.gpu else ["no pinned"]
    return [_timed("tune pin_memory candidates", "4 candidates", expected, body)]


def check_frameworks(ctx: Context) -> list[Result]:
    results = []
    fp16_on_bf16 = ctx.expect(*(["TD306"] if ctx.bf16_capable else []))
    for package, script, expected in [
        ("lightning", "lightning_train.py", fp16_on_bf16),
        ("transformers", "transformers_train.py", fp16_on_bf16),
        ("accelerate", "accelerate_train.py", fp16_on_bf16),
    ]:
        try:
            __import__(package)
        except ImportError:
            results.append(
                Result(
                    f"{package} healthy twin",
                    "not installed",
                    expected,
                    [],
                    True,
                    0.0,
                    error=f"skipped: {package} is not installed",
                )
            )
            continue

        def body(script: str = script) -> tuple[list[str], dict[str, Any]]:
            report = framework_run(ctx, script, [])
            profile = report["profile"]
            return (
                sorted({f["code"] for f in report["findings"]}),
                {"steps": profile.get("steps"), "verdict": profile.get("verdict")},
            )

        variant = "fp16 + framework scaler, checkpoints" if ctx.gpu else "CPU"
        results.append(_timed(f"{package} healthy twin", variant, expected, body))
    return results


CHECKS: list[Callable[[Context], list[Result]]] = [
    check_profile,
    check_mfu,
    check_td801_td309,
    check_gemm_premise,
    check_overhead,
    check_td101,
    check_td201_td306,
    check_td301_td302,
    check_td401_td402,
    check_verify_resume,
    check_tune,
    check_frameworks,
]


# ---------------------------------------------------------------------------- output
def markdown(results: list[Result], header: dict[str, Any]) -> str:
    lines = [
        f"GPU check on {header['device_name']} (capability {header['capability']}, "
        f"torch {header['torch']}), {header['total_s']:.0f} s",
        "",
        "| check | variant | expected | reported | result | s | numbers |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [r.row() for r in results]
    return "\n".join(lines) + "\n"


def gpu_context(workdir: Path, rehearse_on_cpu: bool) -> Context | None:
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        # native bfloat16 from Ampere (8.0) on: is_bf16_supported() also counts emulation (T4, V100)
        return Context("cuda", (major, minor) >= (8, 0), (major, minor), workdir)
    if rehearse_on_cpu:
        return Context("cpu", False, None, workdir, rehearsal=True)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default="gpu_check.json", help="JSON results (default: %(default)s)")
    parser.add_argument("--markdown", default="gpu_check.md", help="markdown table (default: %(default)s)")
    parser.add_argument("--only", default="", help="comma-separated check function names (e.g. check_td101)")
    parser.add_argument(
        "--allow-cpu",
        "--rehearse-on-cpu",
        dest="allow_cpu",
        action="store_true",
        help="without CUDA, rehearse the workloads on the CPU (GPU-only findings must stay silent)",
    )
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_check needs torch: make test (or pip install torch) first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        ctx = gpu_context(Path(tmp), args.allow_cpu)
        if ctx is None:
            print(CPU_WHEEL.format(version=torch.__version__) if torch.version.cuda is None else NEEDS_GPU)
            return 2
        wanted = {n for n in args.only.split(",") if n}
        start = time.perf_counter()
        results: list[Result] = []
        for check in CHECKS:
            if wanted and check.__name__ not in wanted:
                continue
            rows = check(ctx)
            results.extend(rows)
            for r in rows:
                print(r.row(), flush=True)
        total = time.perf_counter() - start
    header = {
        "device": ctx.device,
        "device_name": torch.cuda.get_device_name() if ctx.gpu else "CPU (rehearsal)",
        "capability": list(ctx.capability) if ctx.capability else None,
        "bf16_capable": ctx.bf16_capable,
        "torch": torch.__version__,
        "total_s": total,
        "rehearsal": ctx.rehearsal,
    }
    failed = [r for r in results if not r.passed]
    Path(args.json).write_text(
        json.dumps(
            {"header": header, "results": [asdict(r) for r in results], "failed": len(failed)}, indent=2, default=str
        )
        + "\n"
    )
    table = markdown(results, header)
    Path(args.markdown).write_text(table)
    print("\n" + table)
    print(f"{len(results) - len(failed)}/{len(results)} checks passed; wrote {args.json} and {args.markdown}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
