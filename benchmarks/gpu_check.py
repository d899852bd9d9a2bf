"""Validate every GPU path of traindoctor in one go on one NVIDIA GPU (under 5 minutes).

    python benchmarks/gpu_check.py [--json gpu_check.json] [--markdown gpu_check.md]
    make gpu-check

What runs (each row: what the doctor must report on a CUDA run, what it reported, numbers):

* host-to-device copies without and with ``pin_memory`` (TD101 and its evidence; raw copy
  bandwidth pageable vs pinned; the profile's host-to-device row);
* TD201 (batch not a multiple of 8) under float16 and bfloat16 autocast, silent without autocast
  and for a batch of 32;
* TD306 (float16 autocast on a bfloat16-capable GPU), silent under bfloat16 autocast;
* TD301 (float16 without GradScaler) and TD302 (clipping before ``unscale_``) with CUDA gradients;
* TD401 (cudnn.benchmark off, fixed conv shapes) and TD402 (benchmark on, varying shapes);
* ``traindoctor verify-resume`` on a CUDA training script: exact within its GPU tolerance;
* ``traindoctor tune``'s pinned candidates: pinned and unpinned loaders copied to the GPU;
* the framework integrations on the GPU when installed: Lightning 16-mixed (its precision plugin
  and GradScaler), the Hugging Face Trainer with fp16 (accelerate's scaler, its checkpoints) and
  an accelerate script with fp16 and ``save_state``: nothing reported for what they handle.

It writes a JSON file and a markdown table and exits 1 when a check failed. Without CUDA it says
that it needs a GPU and exits 0. ``--rehearse-on-cpu`` runs the same workloads on the CPU (for
tests): no GPU-only finding may fire there.
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
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

NEEDS_GPU = (
    "gpu_check needs an NVIDIA GPU with CUDA: torch.cuda.is_available() is False here, "
    "so nothing was run. Run it on a GPU machine: make gpu-check"
)
FRAMEWORK_SCRIPTS = ROOT / "tests" / "integrations" / "scripts"


@dataclass
class Result:
    """One row of the table: a check on one variant."""

    check: str
    variant: str
    expected: list[str]
    observed: list[str]
    passed: bool
    seconds: float
    numbers: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def row(self) -> str:
        status = "error" if self.error else ("pass" if self.passed else "FAIL")
        numbers = ", ".join(f"{k}={_fmt(v)}" for k, v in self.numbers.items())
        if self.error:
            numbers = f"{numbers}; {self.error}" if numbers else self.error
        return (
            f"| {self.check} | {self.variant} | {', '.join(self.expected) or '-'} | "
            f"{', '.join(self.observed) or '-'} | {status} | {self.seconds:.1f} | {numbers} |"
        )


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@dataclass
class Context:
    """Where the workloads run: ``device`` is "cuda" (or "cpu" when rehearsing)."""

    device: str
    bf16_capable: bool
    capability: tuple[int, int] | None
    workdir: Path
    rehearsal: bool = False

    @property
    def small(self) -> bool:
        """Smaller workloads on a CPU rehearsal (same code paths, seconds instead of minutes)."""
        return self.rehearsal

    @property
    def gpu(self) -> bool:
        return self.device == "cuda"

    def expect(self, *codes: str, gpu_only: bool = True) -> list[str]:
        """The codes a run must report here: GPU-only codes never on a CPU rehearsal."""
        return sorted(codes) if (self.gpu or not gpu_only) else []


def _sync(ctx: Context) -> None:
    import torch

    if ctx.gpu:
        torch.cuda.synchronize()


@contextlib.contextmanager
def _cudnn_benchmark(value: bool) -> Iterator[None]:
    import torch

    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = value
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved


def _watch(select: list[str], work: Callable[[], None]) -> Any:
    import traindoctor

    with traindoctor.watch(select=select) as doctor:
        work()
    return doctor


def _codes(doctor: Any) -> list[str]:
    return sorted({f.code for f in doctor.findings})


def _evidence(doctor: Any, code: str) -> dict[str, Any]:
    for f in doctor.findings:
        if f.code == code:
            return dict(f.evidence or {})
    return {}


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


# ---------------------------------------------------------------------------- checks
def _timed(
    check: str,
    variant: str,
    expected: list[str],
    body: Callable[[], tuple[list[str], dict[str, Any]]],
    passed: Callable[[list[str], dict[str, Any]], bool] | None = None,
) -> Result:
    start = time.perf_counter()
    try:
        observed, numbers = body()
        ok = passed(observed, numbers) if passed else observed == expected
        return Result(check, variant, expected, observed, ok, time.perf_counter() - start, numbers)
    except Exception as exc:  # one broken check must not hide the others
        return Result(
            check,
            variant,
            expected,
            [],
            False,
            time.perf_counter() - start,
            error=f"{type(exc).__name__}: {str(exc)[:300]}",
        )


def check_td101(ctx: Context) -> list[Result]:
    results = [
        _timed(
            "H2D copy bandwidth",
            "64 MiB x5",
            [],
            lambda: ([], copy_bandwidth(ctx)),
            passed=lambda _o, n: not ctx.gpu or n["pinned_GBps"] > 0,
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
        cap = tuple(torch.cuda.get_device_capability())
        return Context("cuda", bool(torch.cuda.is_bf16_supported()), cap, workdir)  # type: ignore[arg-type]
    if rehearse_on_cpu:
        return Context("cpu", False, None, workdir, rehearsal=True)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default="gpu_check.json", help="JSON results (default: %(default)s)")
    parser.add_argument("--markdown", default="gpu_check.md", help="markdown table (default: %(default)s)")
    parser.add_argument("--only", default="", help="comma-separated check function names (e.g. check_td101)")
    parser.add_argument(
        "--rehearse-on-cpu",
        action="store_true",
        help="without CUDA, run the workloads on the CPU (GPU-only findings must stay silent)",
    )
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_check needs torch: make test (or pip install torch) first", file=sys.stderr)
        return 0
    with tempfile.TemporaryDirectory(prefix="gpu_check-") as tmp:
        ctx = gpu_context(Path(tmp), args.rehearse_on_cpu)
        if ctx is None:
            print(NEEDS_GPU)
            return 0
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
