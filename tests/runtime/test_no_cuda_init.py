"""The watch never initialises CUDA by itself, and names the device the script works on."""

from __future__ import annotations

import pytest
import torch
from helpers.data_loops import SleepyDataset, train
from helpers.sim_loops import FAKE_CUDA
from torch.utils.data import DataLoader

import traindoctor
from traindoctor.runtime.device import detect_device

#: torch.cuda calls that would initialise CUDA (or create a context) if the doctor made them.
_INITIALISING = (
    "current_device",
    "get_device_properties",
    "memory_stats",
    "memory_allocated",
    "max_memory_allocated",
    "current_stream",
    "synchronize",
    "is_bf16_supported",
    "init",
)


@pytest.fixture
def cuda_calls_forbidden(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    called: list[str] = []
    for name in _INITIALISING:

        def forbidden(*args: object, _name: str = name, **kwargs: object) -> None:
            called.append(_name)
            raise AssertionError(f"the doctor called torch.cuda.{_name}() before the script initialised CUDA")

        monkeypatch.setattr(torch.cuda, name, forbidden)
    return called


def test_watch_leaves_cuda_uninitialised_on_a_run_without_gpu_work(cuda_calls_forbidden: list[str]) -> None:
    # the session believes a GPU is there (as on a GPU machine) but the script trains on the CPU
    loader = DataLoader(SleepyDataset(48), batch_size=8)
    with traindoctor.watch(device=FAKE_CUDA) as doctor:
        train(loader)
    with traindoctor.watch():  # the device detected for real
        train(loader)
    assert not torch.cuda.is_initialized()
    assert cuda_calls_forbidden == []
    assert doctor.gpu is not None and doctor.gpu.timer is None  # never started: no GPU work
    assert doctor.profile.gpu is None and doctor.profile.steps == 6
    assert not [n for n in doctor.notes if "internal error" in n]


def test_detect_device_reads_only_the_count_before_the_script_initialises_cuda(
    monkeypatch: pytest.MonkeyPatch, cuda_calls_forbidden: list[str]
) -> None:
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # NVML's answer
    info = detect_device()
    assert cuda_calls_forbidden == []
    assert (info.type, info.cuda_available, info.device_count, info.platform) == ("cuda", True, 2, "CUDA")
    assert info.capability is None and "not initialised" in info.name


def test_rocm_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.version, "hip", "6.2.41133")
    info = detect_device()
    assert info.platform == "ROCm" and info.name.startswith("ROCm device")


def test_device_facts_are_read_from_the_model_device_once_the_script_used_it() -> None:
    from helpers.sim_cuda import SimulatedCuda
    from helpers.sim_loops import run_sim_loop

    sim = SimulatedCuda(devices=2, current=0, name="NVIDIA A100-SXM4-80GB", capability=(8, 0))
    session, _truth, _sim = run_sim_loop(sim=sim, device=1, steps=4)
    assert session.device.name == "NVIDIA A100-SXM4-80GB" and session.device.capability == (8, 0)
    assert session.device.bf16_supported  # native on 8.0 (not counting emulation)
    assert sim.gpus[0].touched == 0
