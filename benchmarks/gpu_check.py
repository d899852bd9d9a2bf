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
CPU_WHEEL = (
    "gpu_check needs torch's CUDA wheel: this torch ({version}) was built without CUDA, so nothing "
    "was run. Install the CUDA wheel as the docstring of benchmarks/gpu_check.py says, then: make gpu-check"
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


# ---------------------------------------------------------------------------- device time
def _gpu_numbers(doctor: Any) -> dict[str, Any]:
    """The verdict and the device-time numbers a profile row shows."""
    prof = doctor.profile
    out: dict[str, Any] = {"verdict": prof.verdict}
    gpu = prof.gpu
    if gpu is not None:
        out["gpu_step_ms"] = round(gpu.span * 1e3, 3)
        out["busy"] = round(gpu.share(gpu.busy_s), 3)
        for key in ("transfer", "forward", "backward", "optimizer"):
            out[f"busy_{key}_ms"] = round(gpu.busy[key] * 1e3, 3)
        for key, value in gpu.idle.items():
            if value:
                out[f"idle_{key}_ms"] = round(value * 1e3, 3)
        out["syncs_per_step"] = gpu.syncs_per_step
        out["host_step_ms"] = round(prof.step_s * 1e3, 3)
    return out


def profile_loop(
    ctx: Context,
    *,
    steps: int = 30,
    width: int = 4096,
    layers: int = 4,
    batch: int = 4096,
    dtype: str = "bfloat16",
    copy_mb: int = 0,
    pinned: bool = False,
    item_sleep_s: float | None = None,
    tiny_kernels: int = 0,
    slow_items_s: float = 0.0,
    select: list[str] | None = None,
) -> Any:
    """One watched training loop with a bottleneck set by its arguments (see the docstring)."""
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    if ctx.small:
        steps, width, batch, copy_mb, tiny_kernels = min(steps, 8), 64, 32, min(copy_mb, 1), min(tiny_kernels, 20)
    torch.manual_seed(0)
    dev = ctx.device
    cast = getattr(torch, dtype) if ctx.gpu else torch.float32
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).to(dev, cast)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x_dev = torch.randn(batch, width, device=dev, dtype=cast)
    host = None
    if copy_mb:
        host = torch.empty(copy_mb * 2**20 // 4, dtype=torch.float32, pin_memory=pinned and ctx.gpu)
    small = torch.zeros(64, device=dev)

    class Slow(Dataset[Any]):
        def __len__(self) -> int:
            return steps * 8

        def __getitem__(self, i: int) -> Any:
            time.sleep(slow_items_s)
            return torch.zeros(1)

    def work() -> None:
        items: Any = DataLoader(Slow(), batch_size=8) if slow_items_s else range(steps)
        for _ in items:
            if host is not None:
                host.to(dev, non_blocking=pinned)
            out = model(x_dev)
            loss = out.float().square().mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            for _k in range(tiny_kernels):
                small.add_(1.0)
            opt.step()
            if item_sleep_s is not None:
                loss.item()
                time.sleep(item_sleep_s)
        _sync(ctx)

    return _watch(select or [], work)


def _profile_row(
    ctx: Context,
    variant: str,
    verdict: str,
    loop: Callable[[], Any],
    extra: Callable[[dict[str, Any]], bool] | None = None,
) -> Result:
    def body() -> tuple[list[str], dict[str, Any]]:
        doctor = loop()
        numbers = _gpu_numbers(doctor)
        return [numbers["verdict"]], numbers

    def passed(observed: list[str], numbers: dict[str, Any]) -> bool:
        if not ctx.gpu:  # rehearsal: the machinery ran, and no device profile was invented
            return "gpu_step_ms" not in numbers
        return observed == [verdict] and (extra is None or extra(numbers))

    return _timed("device-time profile", variant, [verdict] if ctx.gpu else [], body, passed)


def check_profile(ctx: Context) -> list[Result]:
    rows = [
        _profile_row(
            ctx,
            "compute-bound: bf16 matmuls, data on the GPU",
            "compute-bound",
            lambda: profile_loop(ctx),
            lambda n: n["busy"] >= 0.9,
        ),
        _profile_row(
            ctx,
            "pageable 256 MiB copy per step",
            "transfer-bound",
            lambda: profile_loop(ctx, width=1024, layers=2, batch=256, copy_mb=256),
        ),
        _profile_row(
            ctx,
            "pinned 256 MiB copy per step, non_blocking",
            "transfer-bound",
            lambda: profile_loop(ctx, width=1024, layers=2, batch=256, copy_mb=256, pinned=True),
        ),
        _profile_row(
            ctx,
            "data-bound: 8 x 2 ms __getitem__ per batch",
            "data-bound",
            lambda: profile_loop(ctx, width=1024, layers=2, batch=256, slow_items_s=0.002),
            lambda n: n.get("idle_data_ms", 0) >= 0.5 * n["gpu_step_ms"],
        ),
        _profile_row(
            ctx,
            "sync-bound: loss.item() then 20 ms of host work",
            "sync-bound",
            lambda: profile_loop(ctx, item_sleep_s=0.02),
            lambda n: abs(n["syncs_per_step"] - 1.0) < 0.01,
        ),
        _profile_row(
            ctx,
            "host-bound: 2000 tiny kernels per step",
            "host-bound",
            lambda: profile_loop(ctx, width=256, layers=2, batch=64, tiny_kernels=2000),
        ),
    ]
    pageable, pinned = rows[1], rows[2]
    if ctx.gpu and not (pageable.error or pinned.error):
        faster = pageable.numbers.get("busy_transfer_ms", 0) >= 1.5 * pinned.numbers.get("busy_transfer_ms", 1e9)
        pinned.numbers["pinned_speedup"] = round(
            pageable.numbers.get("busy_transfer_ms", 0) / max(pinned.numbers.get("busy_transfer_ms", 0), 1e-9), 2
        )
        pinned.passed = pinned.passed and faster
    rows.append(check_tf32(ctx))
    return rows


@contextlib.contextmanager
def _matmul_precision(value: str) -> Iterator[None]:
    import torch

    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(value)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(saved)


def check_td801_td309(ctx: Context) -> list[Result]:
    """TD801 on the sync-per-step workload (and silent on the compute-bound loop with one
    ``loss.item()`` per step); TD309 on float32 GEMMs with TF32 off (silent with it on)."""
    capable = bool(ctx.capability and ctx.capability >= (8, 0))
    variants: list[tuple[str, str, list[str], Callable[[], Any], Callable[[dict[str, Any]], bool]]] = [
        (
            "TD801 sync-every-step",
            "loss.item() then 20 ms of host work",
            ctx.expect("TD801"),
            lambda: profile_loop(ctx, item_sleep_s=0.02, select=["TD801"]),
            lambda ev: ev.get("site_syncs_per_step") == 1.0 and ev.get("sync_idle_share", 0) >= 0.5,
        ),
        (
            "TD801 sync-every-step",
            "loss.item() per step, big bf16 kernels",
            [],
            lambda: profile_loop(ctx, item_sleep_s=0.0, select=["TD801"]),
            lambda ev: True,
        ),
        (
            "TD309 tf32-off",
            "fp32 Linear 4096, precision 'highest'",
            ctx.expect("TD309") if capable else [],
            lambda: _with(_matmul_precision("highest"), lambda: profile_loop(ctx, dtype="float32", select=["TD309"])),
            lambda ev: ev.get("fp32_gemm_share", 0) >= 0.5 and ev.get("peak_known") is True,
        ),
        (
            "TD309 tf32-off",
            "fp32 Linear 4096, precision 'high'",
            [],
            lambda: _with(_matmul_precision("high"), lambda: profile_loop(ctx, dtype="float32", select=["TD309"])),
            lambda ev: True,
        ),
    ]
    rows = []
    for check, variant, expected, loop, evidence_ok in variants:

        def body(loop: Callable[[], Any] = loop, code: str = check.split()[0]) -> tuple[list[str], dict[str, Any]]:
            doctor = loop()
            numbers = {k: v for k, v in _evidence(doctor, code).items() if not isinstance(v, (list, dict))}
            numbers["verdict"] = doctor.profile.verdict
            return _codes(doctor), numbers

        def passed(
            observed: list[str], numbers: dict[str, Any], expected: list[str] = expected, ok: Any = evidence_ok
        ) -> bool:
            return observed == expected and (not expected or ok(numbers))

        rows.append(_timed(check, variant, expected, body, passed))
    return rows


def _with(manager: Any, work: Callable[[], Any]) -> Any:
    with manager:
        return work()


def _timed_matmul(ctx: Context, a: Any, b: Any, repeats: int) -> float:
    """Seconds per ``a @ b`` (CUDA events on the GPU; the host clock on a rehearsal)."""
    import torch

    for _ in range(3):
        a @ b
    if not ctx.gpu:
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        return (time.perf_counter() - start) / repeats
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(repeats):
        a @ b
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / 1000.0 / repeats


def check_tf32(ctx: Context) -> Result:
    """TD309's premise: fp32 GEMMs with TF32 off run at the fp32 peak, several times slower."""
    import torch

    def body() -> tuple[list[str], dict[str, Any]]:
        n = 256 if ctx.small else 8192
        a = torch.randn(n, n, device=ctx.device)
        b = torch.randn(n, n, device=ctx.device)
        saved = torch.backends.cuda.matmul.allow_tf32
        try:
            torch.backends.cuda.matmul.allow_tf32 = False
            off = _timed_matmul(ctx, a, b, 5 if ctx.small else 20)
            torch.backends.cuda.matmul.allow_tf32 = True
            on = _timed_matmul(ctx, a, b, 5 if ctx.small else 20)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = saved
        tflops = 2 * n**3 / 1e12
        return ["measured"], {
            "fp32_TFLOPs": round(tflops / off, 1),
            "tf32_TFLOPs": round(tflops / on, 1),
            "speedup": round(off / on, 2),
        }

    capable = bool(ctx.capability and ctx.capability >= (8, 0))
    return _timed(
        "TF32 off vs on (TD309's premise)",
        "8192^2 fp32 GEMM",
        ["measured"],
        body,
        passed=lambda o, n: o == ["measured"] and (not capable or n["speedup"] >= 2.0),
    )


def check_gemm_premise(ctx: Context) -> list[Result]:
    """TD201's premise: a bf16 GEMM whose batch is not a multiple of 8 costs more per sample."""
    import torch

    def body() -> tuple[list[str], dict[str, Any]]:
        k = 256 if ctx.small else 4096
        dtype = torch.bfloat16 if ctx.gpu else torch.float32
        w = torch.randn(k, k, device=ctx.device, dtype=dtype)
        per_sample = {}
        for batch in (30, 32, 64):
            x = torch.randn(batch, k, device=ctx.device, dtype=dtype)
            per_sample[batch] = _timed_matmul(ctx, x, w, 20 if ctx.small else 500) / batch
        numbers = {f"us_per_sample_b{b}": round(v * 1e6, 4) for b, v in per_sample.items()}
        numbers["b30_over_b32"] = round(per_sample[30] / per_sample[32], 3)
        return (["premise holds"] if per_sample[30] > 1.05 * per_sample[32] else ["premise does not hold"]), numbers

    expected = ["premise holds"] if ctx.gpu else []
    return [
        _timed(
            "TD201 premise: bf16 GEMM",
            "batch 30 vs 32 vs 64",
            expected,
            body,
            passed=lambda o, n: o == ["premise holds"] if ctx.gpu else bool(n),
        )
    ]


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


def _plain_step_seconds(ctx: Context, width: int, layers: int, batch: int, steps: int = 20) -> float:
    """Mean step time of profile_loop's compute-bound loop, unwatched, timed by CUDA events
    around ``steps`` steps after 5 warm-up steps (the truth the doctor's MFU is checked against)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, width) for _ in range(layers)]).to(ctx.device, torch.bfloat16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(batch, width, device=ctx.device, dtype=torch.bfloat16)

    def step() -> None:
        loss = model(x).float().square().mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / steps


def check_mfu(ctx: Context) -> list[Result]:
    """The doctor's FLOPs and MFU against known ones: a bf16 Linear stack does (6 x layers - 2) x
    batch x width^2 FLOPs a step (forward 2 per layer, backward 4, less the first layer's input
    gradient, which nothing needs), and the step time comes from an unwatched run
    timed by events. The loop never waits for the device, so the host runs ahead of it: the
    doctor's MFU must use the device's step time, not the host's launch times."""
    width, layers, batch = (64, 2, 32) if ctx.small else (4096, 4, 4096)

    def body() -> tuple[list[str], dict[str, Any]]:
        from traindoctor.runtime.peak_flops import device_peaks

        doctor = profile_loop(ctx, width=width, layers=layers, batch=batch)
        tp = doctor.profile.throughput
        expected = (6 * layers - 2) * batch * width * width
        numbers: dict[str, Any] = {
            "flops_counted": tp.flops_per_step,
            "flops_expected": expected,
            "mfu": None if tp.mfu is None else round(tp.mfu, 4),
        }
        if ctx.gpu:
            import torch

            step_s = _plain_step_seconds(ctx, width, layers, batch)
            found = device_peaks(torch.cuda.get_device_name())
            numbers["plain_step_ms"] = round(step_s * 1e3, 3)
            numbers["mfu_truth"] = round(expected / step_s / found[1]["bf16"], 4) if found else None
        else:
            numbers["mfu_note"] = tp.mfu_note
        return (["mfu"] if tp.mfu is not None else []), numbers

    def passed(observed: list[str], n: dict[str, Any]) -> bool:
        if not ctx.gpu:  # rehearsal: no FLOPs probe on a CPU run, and no MFU invented
            return n["mfu"] is None
        counted, truth = n["flops_counted"], n.get("mfu_truth")
        return (
            observed == ["mfu"]
            and counted is not None
            and abs(counted / n["flops_expected"] - 1) < 0.02
            and truth is not None
            and abs(n["mfu"] / truth - 1) < 0.15
        )

    variant = f"bf16 Linear {width} x {layers}, batch {batch}, no sync in the step"
    return [_timed("MFU vs a known one", variant, ["mfu"] if ctx.gpu else [], body, passed)]


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
