"""TD101 pin-memory-off: static and runtime.

The fix, and the runtime copy timing on a fake CUDA device (GPU-only: never on a CPU run).
"""

from __future__ import annotations

import time
import warnings

import pytest
import torch
from helpers.data_loops import SleepyDataset, train
from helpers.rule_loops import codes, finding
from helpers.snippets import data_check
from torch.utils.data import DataLoader

import traindoctor
from traindoctor.runtime.device import DeviceInfo
from traindoctor.runtime.probes.transfer import TransferProbe

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


# ------------------------------------------------------------------ traindoctor check
def test_td101_fix_replaces_keyword_false():
    src = """
    import torch
    loader = torch.utils.data.DataLoader(ds, batch_size=64, pin_memory=False, num_workers=4)
    for x in loader:
        model(x.cuda()).sum().backward()
    """
    result = data_check(src, ["TD101"], fix=True)
    assert "pin_memory=True, num_workers=4)" in result.fixed_source
    assert result.findings == []


# ------------------------------------------------------------------ traindoctor run
FAKE_GPU = DeviceInfo(
    type="cuda",
    name="Fake GPU",
    capability=(8, 0),
    bf16_supported=True,
    cuda_available=True,
    total_memory=80 * 2**30,
    device_count=1,
)


def _fake_copy(doctor: traindoctor.runtime.session.Session):  # type: ignore[name-defined]
    probe = next(p for p in doctor.probes if isinstance(p, TransferProbe))

    def copy(batch: torch.Tensor) -> None:
        probe.copied(batch, 0.004, time.perf_counter())  # as if `batch.cuda()` took 4 ms

    return copy


def test_td101_fires_for_unpinned_batches_copied_to_cuda() -> None:
    with traindoctor.watch(select=["TD101"], device=FAKE_GPU) as doctor:
        loader = DataLoader(SleepyDataset(24), batch_size=4, pin_memory=False)
        train(loader, on_batch=_fake_copy(doctor))
    f = finding(doctor, "TD101")
    assert f.evidence["copies"] == 5  # step 1 left out
    assert f.evidence["clock"] == "host"  # no step timed on a device
    assert f.evidence["transfer_share"] > 0.01
    assert f.evidence["ms_per_copy"] == pytest.approx(4.0)
    assert doctor.uses_cuda


def test_td101_silent_for_pinned_loader() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "pin_memory but no accelerator" on a CPU build
        with traindoctor.watch(select=["TD101"], device=FAKE_GPU) as doctor:
            loader = DataLoader(SleepyDataset(24), batch_size=4, pin_memory=True)
            train(loader, on_batch=_fake_copy(doctor))
    assert codes(doctor) == []


def test_td101_never_fires_on_a_cpu_run() -> None:
    with traindoctor.watch(select=["TD101"], device=DeviceInfo()) as doctor:
        assert not any(isinstance(p, TransferProbe) for p in doctor.probes)
        loader = DataLoader(SleepyDataset(24), batch_size=4)
        info = {}

        def copy(batch: torch.Tensor) -> None:
            # The monitor sees a CUDA copy, but the device is a CPU: the session drops it.
            doctor.record_transfer(batch.numel() * 4, 0.004, False, "cuda", doctor.loaders[0])
            info["monitor"] = next(m for m in doctor.monitors if m.rule.code == "TD101")

        train(loader, on_batch=copy)
    assert info["monitor"].findings  # the monitor itself judged it a mistake...
    assert codes(doctor) == []  # ...but a GPU-only finding never leaves a CPU run


def test_td101_from_device_time_of_training_copies_only() -> None:
    # the simulated device: pageable copies of 4 ms each, timed by events; the batches of an
    # evaluation loader copied the same way are not counted
    from helpers.sim_cuda import SimulatedCuda
    from helpers.sim_loops import run_sim_loop

    nbytes = 16 * 8 * 4
    sim = SimulatedCuda(pageable_gbps=nbytes / 0.004 / 1e9)
    session, truth, _sim = run_sim_loop(sim=sim, batch=16, select=["TD101"])
    f = finding(session, "TD101")
    assert f.evidence["clock"] == "device"
    assert f.evidence["copies"] == 29  # 30 steps, step 1 left out
    # x (4 ms) and y (0.5 ms) per step: the share of the GPU's step time, from events
    assert f.evidence["transfer_share"] == pytest.approx(truth.busy["copy"] / truth.span, rel=0.1)
    assert "frees the host" in f.message and "overlap with compute" not in f.message
