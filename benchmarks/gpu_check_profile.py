"""The device-time rows of ``gpu_check.py``: the profile on loops with a known bottleneck, TD801
and TD309 on them, TF32 and TD201's GEMM premise, and MFU against a known one."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

from gpu_check_core import Context, Result, _codes, _evidence, _sync, _timed, _watch


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
