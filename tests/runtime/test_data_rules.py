"""Runtime halves of TD101-TD106 and TD603 on tiny real CPU loops: mistake vs healthy twin."""

from __future__ import annotations

import time
import warnings

import pytest
import torch
from data_loops import SleepyDataset, codes, finding, slow_worker_start, train
from torch.utils.data import DataLoader, TensorDataset

import traindoctor
from traindoctor.runtime.device import DeviceInfo
from traindoctor.runtime.probes.transfer import TransferProbe

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

FAKE_GPU = DeviceInfo(
    type="cuda",
    name="Fake GPU",
    capability=(8, 0),
    bf16_supported=True,
    cuda_available=True,
    total_memory=80 * 2**30,
    device_count=1,
)


# ---------------------------------------------------------------- TD102
def test_td102_fires_when_main_process_loading_dominates() -> None:
    with traindoctor.watch(select=["TD102"], cpu_count=4, machine_cores=4) as doctor:
        loader = DataLoader(SleepyDataset(48, delay_s=0.003), batch_size=4)  # line of the finding
        train(loader)
    f = finding(doctor, "TD102")
    assert f.filename == __file__
    assert f.location is not None and f.location.row == _line_of("line of the finding")
    ev = f.evidence
    assert ev["data_wait_share"] > 0.2
    assert ev["wait_ms_per_batch"] >= 10.0  # 4 samples x 3 ms of sleep
    assert ev["batches"] == 12
    # sleeping needs no CPU, so the pipeline model lets workers use all 4 cores
    assert ev["load_cpu_ms_per_batch"] < ev["wait_ms_per_batch"] / 2
    assert 2 <= ev["recommended_num_workers"] <= 4
    assert ev["predicted_speedup"] > 1.5
    assert "num_workers=" in f.message


def test_td102_on_two_cores_recommends_the_workers_that_beat_the_main_process() -> None:
    # The README demo's shape: sleepy loading, a cheap model, 2 cores. One worker only moves the
    # same wait into a process (no faster than 0); two overlap two batches.
    with traindoctor.watch(select=["TD102"], cpu_count=2, machine_cores=2) as doctor:
        train(DataLoader(SleepyDataset(48, delay_s=0.003), batch_size=4))
    f = finding(doctor, "TD102")
    assert f.evidence["recommended_num_workers"] == 2
    assert "`num_workers=2`" in f.message and "predicted" in f.message
    assert "traindoctor tune" in (f.help or "")


def test_td102_silent_for_cheap_in_memory_batches() -> None:
    data = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    data.x = data.tensors[0]  # type: ignore[attr-defined]  # the helper reads .x for the width
    with traindoctor.watch(select=["TD102"]) as doctor:
        train(DataLoader(data, batch_size=8))
    assert codes(doctor) == []
    assert doctor.loaders[0].batches == 32  # the loop was really watched


def test_td102_threshold_is_configurable() -> None:
    with traindoctor.watch(select=["TD102"], thresholds={"TD102.min_wait_share": 0.999}) as doctor:
        train(DataLoader(SleepyDataset(24, delay_s=0.003), batch_size=4))
    assert codes(doctor) == []


# ---------------------------------------------------------------- TD105
def test_td105_fires_when_workers_cannot_keep_up() -> None:
    with traindoctor.watch(select=["TD105"], cpu_count=4, machine_cores=4) as doctor:
        loader = DataLoader(SleepyDataset(40, delay_s=0.01), batch_size=4, num_workers=1)
        train(loader)
    f = finding(doctor, "TD105")
    ev = f.evidence
    assert ev["num_workers"] == 1
    assert ev["data_wait_share"] > 0.2 and ev["wait_ms_per_batch"] > 5
    assert ev["fetch_ms_per_batch_per_worker"] >= 30  # 4 x 10 ms of sleep per batch
    assert ev["recommended_num_workers"] > 1
    assert "traindoctor tune" in (f.help or "")


def test_td105_silent_when_workers_keep_up() -> None:
    with traindoctor.watch(select=["TD105", "TD102"]) as doctor:
        loader = DataLoader(SleepyDataset(40, delay_s=0.001), batch_size=4, num_workers=2)
        train(loader, step_sleep_s=0.02)
    assert codes(doctor) == []
    assert doctor.loaders[0].batches == 10


# ---------------------------------------------------------------- TD103
def test_td103_fires_when_workers_restart_every_epoch() -> None:
    with traindoctor.watch(select=["TD103"]) as doctor:
        loader = DataLoader(SleepyDataset(8), batch_size=4, num_workers=1, worker_init_fn=slow_worker_start)
        train(loader, epochs=3)
    f = finding(doctor, "TD103")
    assert f.evidence["respawns"] == 2 and f.evidence["epochs"] == 3
    assert f.evidence["startup_s_per_epoch"] >= 0.1  # worker_init_fn sleeps 0.15 s
    assert "persistent_workers=True" in f.message


def test_td103_silent_with_persistent_workers() -> None:
    with traindoctor.watch(select=["TD103"]) as doctor:
        loader = DataLoader(
            SleepyDataset(8), batch_size=4, num_workers=1, worker_init_fn=slow_worker_start, persistent_workers=True
        )
        train(loader, epochs=3)
    assert codes(doctor) == []
    info = doctor.loaders[0]
    assert (info.epochs, info.spawns) == (3, 1)


# ---------------------------------------------------------------- TD104 / TD603
def test_td104_fires_with_more_workers_than_usable_cores() -> None:
    with traindoctor.watch(select=["TD104", "TD603"], cpu_count=2, machine_cores=2) as doctor:
        train(DataLoader(SleepyDataset(12), batch_size=4, num_workers=3))
    f = finding(doctor, "TD104")
    assert f.evidence["concurrent_workers"] == 3
    assert f.evidence["usable_cores"] == 2
    assert f.evidence["recommended_total_workers"] == 1
    assert codes(doctor) == ["TD104"]


def test_td104_silent_within_the_cores() -> None:
    with traindoctor.watch(select=["TD104", "TD603"], cpu_count=2, machine_cores=2) as doctor:
        train(DataLoader(SleepyDataset(12), batch_size=4, num_workers=1))
    assert codes(doctor) == []


def test_td603_fires_for_workers_times_local_ranks() -> None:
    with traindoctor.watch(select=["TD104", "TD603"], cpu_count=4, machine_cores=4, local_world_size=2) as doctor:
        train(DataLoader(SleepyDataset(12), batch_size=4, num_workers=3))
    f = finding(doctor, "TD603")
    assert f.evidence == {
        "workers_per_rank": 3,
        "local_world_size": 2,
        "total_workers": 6,
        "machine_cores": 4,
        "recommended_num_workers": 1,
    }
    assert codes(doctor) == ["TD603"]  # not reported twice as TD104


def test_td603_silent_when_ranks_fit() -> None:
    with traindoctor.watch(select=["TD104", "TD603"], cpu_count=4, machine_cores=4, local_world_size=2) as doctor:
        train(DataLoader(SleepyDataset(12), batch_size=4, num_workers=1))
    assert codes(doctor) == []


# ---------------------------------------------------------------- TD106
class ListDataset(SleepyDataset):
    """Keeps 150k Python tuples (file names and labels), as ImageFolder's `samples` does."""

    def __init__(self) -> None:
        super().__init__(16)
        self.samples = [(f"img_{i}.jpg", i % 10) for i in range(150_000)]


class ArrayDataset(SleepyDataset):
    def __init__(self) -> None:
        super().__init__(16)
        self.labels = torch.arange(150_000) % 10


def test_td106_fires_for_large_python_containers_with_workers() -> None:
    with traindoctor.watch(select=["TD106"]) as doctor:
        train(DataLoader(ListDataset(), batch_size=8, num_workers=1))
    f = finding(doctor, "TD106")
    assert f.evidence["containers"][0]["attribute"] == "dataset.samples"
    assert f.evidence["containers"][0]["items"] == 150_000
    assert f.severity.value == "info"


def test_td106_silent_for_tensors_or_without_workers() -> None:
    with traindoctor.watch(select=["TD106"]) as doctor:
        train(DataLoader(ArrayDataset(), batch_size=8, num_workers=1))
        train(DataLoader(ListDataset(), batch_size=8, num_workers=0))
    assert codes(doctor) == []


# ---------------------------------------------------------------- TD101 (GPU only)
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
    assert f.evidence["copies"] == 6
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


def _line_of(marker: str) -> int:
    with open(__file__, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if marker in line and "_line_of" not in line:
                return number
    raise AssertionError(marker)
