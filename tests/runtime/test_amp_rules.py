"""Runtime halves of TD301, TD302, TD305, TD306, TD308 on tiny real CPU loops.

CPU autocast supports float16 and bfloat16 and ``torch.amp.GradScaler("cpu")`` is a real scaler,
so the mixed-precision logic runs for real; only TD306 (GPU-only) uses a fake device.

One file for the five rules, where the rest of each rule is in tests/rules/test_tdNNN.py: they
share one loop (``_amp_steps``), and the TD301 and TD302 findings must point to its autocast and
clipping lines in the tests' own file.
"""

from __future__ import annotations

import torch
from helpers.rule_loops import FAKE_A100, FAKE_V100, codes, finding, line_of, mlp, vectors
from torch import nn

import traindoctor


def _amp_steps(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    *,
    dtype: torch.dtype,
    scaler=None,
    clip: str | None = None,
    unscale: bool = False,
    steps: int = 3,
    loss_factor: float = 1.0,
) -> None:
    for step in range(steps):
        x, y = vectors(8, seed=step)
        with torch.autocast("cpu", dtype=dtype):  # autocast line
            loss = nn.functional.cross_entropy(model(x), y) * loss_factor
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            if unscale:
                scaler.unscale_(opt)
            if clip == "norm":
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # clip line
            scaler.step(opt)
            scaler.update()
        opt.zero_grad()


# ---------------------------------------------------------------- TD301
def test_td301_fp16_autocast_without_scaler_reports_underflow() -> None:
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD301"]) as doctor:
        # A tiny loss: its float16 gradients underflow to exactly zero.
        _amp_steps(model, opt, dtype=torch.float16, loss_factor=1e-9)
    f = finding(doctor, "TD301")
    assert f.filename == __file__ and f.location.row == line_of("# autocast line")
    ev = f.evidence
    assert ev["autocast_dtype"] == "float16" and ev["autocast_device"] == "cpu"
    assert ev["steps_without_scaler"] == 3 and ev["backward_calls"] == 3
    assert ev["zero_grad_fraction"] > 0.9  # measured underflow, not a constant
    assert "GradScaler" in f.message


def test_td301_zero_fraction_is_measured() -> None:
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD301"]) as doctor:
        _amp_steps(model, opt, dtype=torch.float16)
    assert finding(doctor, "TD301").evidence["zero_grad_fraction"] < 0.5  # ordinary loss


def test_td301_silent_with_scaler_or_bf16() -> None:
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD301"]) as doctor:
        _amp_steps(model, opt, dtype=torch.float16, scaler=torch.amp.GradScaler("cpu"))
        _amp_steps(model, opt, dtype=torch.bfloat16)
    assert codes(doctor) == []


def test_td301_disabled_scaler_does_not_count() -> None:
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD301"]) as doctor:
        _amp_steps(model, opt, dtype=torch.float16, scaler=torch.amp.GradScaler("cpu", enabled=False))
    assert codes(doctor) == ["TD301"]


# ---------------------------------------------------------------- TD302
def test_td302_clip_before_unscale() -> None:
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD302"]) as doctor:
        _amp_steps(model, opt, dtype=torch.bfloat16, scaler=torch.amp.GradScaler("cpu"), clip="norm")
    f = finding(doctor, "TD302")
    assert f.filename == __file__ and f.location.row == line_of("# clip line")
    assert f.evidence["clip"] == "clip_grad_norm_"
    assert f.evidence["clips_before_unscale"] == 3
    assert f.evidence["loss_scale"] == 65536.0
    assert "unscale_" in f.message


def test_td302_silent_after_unscale() -> None:
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD302"]) as doctor:
        _amp_steps(model, opt, dtype=torch.bfloat16, scaler=torch.amp.GradScaler("cpu"), clip="norm", unscale=True)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)  # plain fp32 clipping, no scaler
    assert codes(doctor) == []


# ---------------------------------------------------------------- TD305
def test_td305_scaler_with_bf16() -> None:
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD305"]) as doctor:
        scaler = torch.amp.GradScaler("cpu")  # scaler line
        _amp_steps(model, opt, dtype=torch.bfloat16, scaler=scaler)
    f = finding(doctor, "TD305")
    assert f.filename == __file__ and f.location.row == line_of("# scaler line")
    assert f.evidence == {"autocast_dtypes": {"bfloat16": 3}, "scale_calls": 3}


def test_td305_silent_for_fp16_with_scaler_and_bf16_without() -> None:
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD305"]) as doctor:
        _amp_steps(model, opt, dtype=torch.float16, scaler=torch.amp.GradScaler("cpu"))
    with traindoctor.watch(select=["TD305"]) as doctor2:
        _amp_steps(model, opt, dtype=torch.bfloat16)
    assert codes(doctor) == [] and codes(doctor2) == []


# ---------------------------------------------------------------- TD306 (GPU-only: fake device)
def _fp16_cuda_events(doctor, model, opt) -> None:
    """A real CPU loop plus the autocast events a CUDA run would emit."""
    doctor.uses_cuda = True  # what a CUDA run reports
    for step in range(3):
        doctor.emit("on_autocast_enter", "cuda", torch.float16)
        x, y = vectors(8, seed=step)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()


def test_td306_fp16_on_ampere() -> None:
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD306"], device=FAKE_A100) as doctor:
        _fp16_cuda_events(doctor, model, opt)
    f = finding(doctor, "TD306")
    assert f.evidence["capability"] == "8.0" and f.evidence["fp16_autocast_regions"] == 3
    assert "bfloat16" in f.message


def test_td306_silent_on_volta_and_on_cpu() -> None:
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD306"], device=FAKE_V100) as volta:
        _fp16_cuda_events(volta, model, opt)
    with traindoctor.watch(select=["TD306"]) as cpu:
        _amp_steps(model, opt, dtype=torch.float16)
    assert codes(volta) == [] and codes(cpu) == []


# ---------------------------------------------------------------- TD308
def test_td308_half_weights() -> None:
    model = mlp(norm=False).half()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD308"]) as doctor:
        for step in range(2):
            x, y = vectors(8, seed=step)
            nn.functional.cross_entropy(model(x.half()).float(), y).backward()
            opt.step()
            opt.zero_grad()
    f = finding(doctor, "TD308")
    assert f.evidence["float16_params"] == 4 and f.evidence["params"] == 4
    assert f.evidence["names"] == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_td308_silent_for_float32_weights_under_autocast() -> None:
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD308"]) as doctor:
        _amp_steps(model, opt, dtype=torch.bfloat16)
    assert codes(doctor) == []
