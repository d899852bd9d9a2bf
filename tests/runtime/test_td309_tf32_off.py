"""TD309 at run time: a real float32 Linear loop whose kernels run on the simulated device.

The layer is 1024x1024 on batches of 64: 0.40 GFLOP per training step (forward and backward),
6.0 us at the simulated H100's 67 TFLOP/s float32 peak, on a GPU step of about 23 us (12 us of
simulated kernels, the rest launch latency and copies): a share of about 0.26. TF32 on, autocast, a pre-Ampere device and a CPU run
stay silent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
from helpers.rule_loops import codes, finding
from helpers.sim_cuda import SimulatedCuda
from helpers.sim_loops import FAKE_CUDA

import traindoctor

FEATURES = 1024


class SimLinear(torch.nn.Module):
    """A real float32 Linear whose forward also queues simulated kernels (4 us forward, 8 us backward)."""

    def __init__(self, sim: SimulatedCuda) -> None:
        super().__init__()
        self.sim = sim
        self.lin = torch.nn.Linear(FEATURES, FEATURES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.sim.launch("forward", 4e-6)
        self.sim.launch("backward", 8e-6)  # queued here: the device keeps the time, not the order
        return self.sim.on(self.lin(self.sim.on(x)).square().mean())


@contextlib.contextmanager
def _precision(value: str) -> Iterator[None]:
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(value)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def _run(*, capability: tuple[int, int] = (9, 0), precision: str = "highest", autocast: bool = False):
    sim = SimulatedCuda(capability=capability, pageable_gbps=2000.0)  # copies: 0.13 us
    torch.manual_seed(0)
    model = sim.place(SimLinear(sim), 0)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    x = torch.randn(64, FEATURES)
    with (
        _precision(precision),
        sim.installed(),
        traindoctor.watch(device=FAKE_CUDA, cuda=sim, select=["TD309"]) as doctor,
    ):
        for _ in range(12):
            if autocast:
                doctor.emit("on_autocast_enter", "cuda", torch.bfloat16)
            loss = model(x.to("cuda"))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return doctor


def test_fp32_linear_with_tf32_off_on_hopper_fires_with_its_share() -> None:
    doctor = _run()
    f = finding(doctor, "TD309")
    ev = f.evidence
    assert ev["gflop_per_step"] == pytest.approx(3 * 2 * 64 * FEATURES * FEATURES / 1e9, rel=1e-3)
    assert ev["fp32_peak_tflops"] == 67.0 and ev["peak_known"] is True
    assert ev["fp32_gemm_ms"] == pytest.approx(0.4027 / 67.0, rel=0.01)
    assert ev["fp32_gemm_share"] == pytest.approx(ev["fp32_gemm_ms"] / ev["gpu_step_ms"], rel=0.01)
    assert 0.2 < ev["fp32_gemm_share"] < 0.5, ev
    assert ev["matmul_fp32_precision"] == "ieee" and ev["conv_fp32_precision"] == "tf32"
    assert ev["capability"] == "9.0"
    assert "set_float32_matmul_precision('high')" in f.message


@pytest.mark.parametrize(
    "kwargs",
    [{"precision": "high"}, {"autocast": True}, {"capability": (7, 0)}],
    ids=["tf32-on", "bf16-autocast", "volta"],
)
def test_healthy_twins_stay_silent(kwargs) -> None:
    doctor = _run(**kwargs)
    assert doctor.gpu_profile is not None and doctor.gpu_profile.span > 0  # the GPU was timed
    assert "TD309" not in codes(doctor)


def test_a_cpu_run_never_fires() -> None:
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with _precision("highest"), traindoctor.watch(select=["TD309"]) as doctor:
        for _ in range(10):
            loss = model(torch.randn(8, 64)).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert "TD309" not in codes(doctor)


@pytest.mark.parametrize(
    ("name", "tflops", "known"),
    [
        ("NVIDIA A100-SXM4-80GB", 19.5, True),
        ("NVIDIA A10", 31.2, True),
        ("NVIDIA H100 PCIe", 51.0, True),
        ("NVIDIA H100 80GB HBM3", 67.0, True),
        ("NVIDIA L40S", 91.6, True),
        ("NVIDIA L4", 30.3, True),
        ("NVIDIA GeForce RTX 5090", 105.0, False),
    ],
)
def test_fp32_peaks_by_device_name(name: str, tflops: float, known: bool) -> None:
    from traindoctor.facts.gpu.runtime import fp32_peak_tflops

    assert fp32_peak_tflops(name) == (tflops, known)


def test_layer_flops_of_convolutions() -> None:
    from traindoctor.facts.gpu.runtime import layer_flops

    conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
    assert layer_flops(conv, "conv", (4, 3, 32, 32)) == 2 * 3 * 9 * 8 * 16 * 16 * 4
    same = torch.nn.Conv2d(4, 8, 5, padding="same", groups=2)
    assert layer_flops(same, "conv", (1, 4, 10, 10)) == 2 * 2 * 25 * 8 * 100
    up = torch.nn.ConvTranspose2d(8, 4, 2, stride=2)
    assert layer_flops(up, "conv", (2, 8, 7, 7)) == 2 * 4 * 4 * 8 * 49 * 2
    assert layer_flops(torch.nn.Linear(16, 32), "linear", (2, 5, 16)) == 2 * 10 * 16 * 32


def test_the_new_per_backend_setting_counts_and_a_mix_of_apis_claims_nothing(monkeypatch) -> None:
    from traindoctor.facts.gpu.runtime import tf32_precisions

    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
    before = matmul.fp32_precision, conv.fp32_precision
    try:
        matmul.fp32_precision = "tf32"
        assert tf32_precisions() == ("tf32", "tf32")
        matmul.fp32_precision, conv.fp32_precision = "ieee", "ieee"
        assert tf32_precisions() == ("ieee", "ieee")
        matmul.fp32_precision, conv.fp32_precision = "none", "tf32"  # unset: the legacy getters decide

        def mixed() -> str:
            raise RuntimeError("PyTorch is checking the matmul precision without a specific backend name")

        monkeypatch.setattr(torch, "get_float32_matmul_precision", mixed)
        assert tf32_precisions() == ("unknown", "tf32")
    finally:
        matmul.fp32_precision, conv.fp32_precision = before
