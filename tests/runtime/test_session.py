"""watch(): restores torch exactly, fails open, and leaves the run's numbers bit-for-bit unchanged."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch
from helpers.data_loops import SleepyDataset, train
from helpers.rule_loops import codes
from torch import nn
from torch.utils.data import DataLoader, Dataset

import traindoctor
from traindoctor.rules.data.td102_loader_in_main_process import (
    LoaderInMainProcess,
    LoaderInMainProcessMonitor,
)
from traindoctor.runtime.events import Monitor
from traindoctor.runtime.probes.base import Probe
from traindoctor.runtime.probes.dataloader import DataLoaderProbe
from traindoctor.runtime.probes.optimizer import OptimizerProbe


def _namespaces() -> list[Any]:
    import torch.amp
    import torch.backends.cudnn
    import torch.nn.modules.module as module_mod
    import torch.nn.utils
    import torch.optim.lr_scheduler
    import torch.optim.optimizer as optimizer_mod
    import torch.serialization
    import torch.utils.data.dataloader as dl
    import torch.utils.data.distributed

    return [
        torch,
        torch.autograd,
        torch.Tensor,
        torch._C.TensorBase,
        dl,
        dl.DataLoader,
        dl._BaseDataLoaderIter,
        nn.Module,
        module_mod,
        torch.optim.Optimizer,
        optimizer_mod,
        torch.optim.lr_scheduler.LRScheduler,
        torch.amp,
        torch.amp.GradScaler,
        torch.autocast,
        torch.nn.utils,
        torch.serialization,
        torch.backends.cudnn,
        torch.utils.data.distributed.DistributedSampler,
    ]


def _snapshot() -> dict[tuple[int, str], Any]:
    snap: dict[tuple[int, str], Any] = {}
    for i, ns in enumerate(_namespaces()):
        for key, value in vars(ns).items():
            snap[(i, key)] = value
            if isinstance(value, dict) and key.startswith("_global_"):
                snap[(i, key + "#items")] = tuple(value.items())  # global hook tables
    return snap


def _changed(before: dict[tuple[int, str], Any], after: dict[tuple[int, str], Any]) -> list[Any]:
    diffs = [k for k, v in before.items() if k not in after or (after[k] is not v and after[k] != v)]
    # New names may only be lazily imported submodules.
    diffs += [k for k, v in after.items() if k not in before and not isinstance(v, types.ModuleType)]
    return diffs


def test_watch_patches_during_the_run_and_restores_everything() -> None:
    # torch replaces some functions lazily on first use (e.g. torch.manual_seed): warm up first.
    train(DataLoader(SleepyDataset(8), batch_size=4, shuffle=True))
    before = _snapshot()
    with traindoctor.watch() as doctor:
        during = _snapshot()
        train(DataLoader(SleepyDataset(16), batch_size=4, shuffle=True), epochs=2)
    assert _changed(before, during), "the probes should be installed during the watch"
    assert _changed(before, _snapshot()) == []
    assert doctor.step == 8 and not doctor.notes


def test_restored_after_an_exception_in_the_training_code() -> None:
    before = _snapshot()
    with pytest.raises(ZeroDivisionError):
        with traindoctor.watch():
            train(DataLoader(SleepyDataset(8), batch_size=4))
            1 / 0
    assert _changed(before, _snapshot()) == []


# ---------------------------------------------------------------- bit-for-bit
class NoisyDataset(Dataset):
    """Random augmentation drawn from the global generator, as real pipelines do."""

    def __init__(self) -> None:
        self.x = torch.arange(64 * 8, dtype=torch.float32).reshape(64, 8) / 100
        self.y = self.x.sum(1, keepdim=True)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i] + 0.01 * torch.randn(8), self.y[i]


def _seeded_run() -> tuple[list[float], list[torch.Tensor], torch.Tensor]:
    torch.manual_seed(1234)
    data = NoisyDataset()
    main = DataLoader(data, batch_size=8, shuffle=True)
    workers = DataLoader(data, batch_size=16, shuffle=True, num_workers=1)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for loader in (main, main, workers):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return losses, [p.detach().clone() for p in model.parameters()], torch.get_rng_state()


def test_watched_run_is_bit_for_bit_identical() -> None:
    plain_losses, plain_weights, plain_rng = _seeded_run()
    with traindoctor.watch() as doctor:
        watched_losses, watched_weights, watched_rng = _seeded_run()
    assert doctor.step == len(watched_losses) == 20
    assert watched_losses == plain_losses
    assert all(torch.equal(a, b) for a, b in zip(plain_weights, watched_weights))
    assert torch.equal(plain_rng, watched_rng)  # the doctor drew nothing from the RNG


# ---------------------------------------------------------------- fail-open
class ExplodingMonitor(Monitor):
    rule = LoaderInMainProcess

    def on_batch_fetched(self, loader_info: Any, wait_s: float) -> None:
        raise RuntimeError("monitor bug")


class ExplodingProbe(Probe):
    name = "exploding"

    def install(self, session: Any) -> None:
        super().install(session)
        raise RuntimeError("probe bug")


def test_a_failing_monitor_or_probe_does_not_break_training() -> None:
    with traindoctor.watch(
        monitors=[ExplodingMonitor, LoaderInMainProcessMonitor],
        probes=[ExplodingProbe, DataLoaderProbe, OptimizerProbe],
    ) as doctor:
        _, losses = train(DataLoader(SleepyDataset(24, delay_s=0.003), batch_size=4))
    assert len(losses) == 6
    notes = "\n".join(doctor.notes)
    assert "ExplodingMonitor.on_batch_fetched" in notes and "monitor bug" in notes
    assert "ExplodingProbe" in notes and "probe bug" in notes
    assert codes(doctor) == ["TD102"]  # the healthy monitor still reported
    assert doctor.report_dict()["notes"] == doctor.notes


class StepCounter(Monitor):
    rule = LoaderInMainProcess

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.ends: list[int] = []

    def on_step_end(self, step_record: Any) -> None:
        self.ends.append(step_record.index)


def test_fake_cuda_run_on_a_cpu_build_still_records_every_step() -> None:
    """``uses_cuda`` set up front (as fake-GPU tests do): the CUDA step clock must not break steps."""
    from traindoctor.runtime.device import DeviceInfo
    from traindoctor.runtime.probes.transfer import TransferProbe

    fake = DeviceInfo(type="cuda", name="Fake GPU", capability=(8, 0), bf16_supported=True, cuda_available=True)
    with traindoctor.watch(monitors=[StepCounter], device=fake) as doctor:
        doctor.uses_cuda = True
        train(DataLoader(SleepyDataset(16), batch_size=4))
    assert any(isinstance(p, TransferProbe) for p in doctor.probes)
    assert doctor.notes == []
    counter = next(m for m in doctor.monitors if isinstance(m, StepCounter))
    assert counter.ends == [1, 2, 3, 4]
    assert doctor.profile.steps == 4


# ---------------------------------------------------------------- declared training reference
def _accumulating_run(lr: float, **reference: Any) -> Any:
    """Batches of 64, four backward calls per step: an effective batch of 256."""
    loader = DataLoader(SleepyDataset(512), batch_size=64)
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    with traindoctor.watch(select=["TD203"], **reference) as doctor:
        for i, (x, y) in enumerate(loader):
            (nn.functional.mse_loss(model(x), y) / 4).backward()
            if (i + 1) % 4 == 0:
                opt.step()
                opt.zero_grad()
    return doctor


def test_watch_reference_keywords_reach_td203() -> None:
    doctor = _accumulating_run(0.1, reference_batch=64, reference_lr=0.1)
    assert doctor.thresholds == {"reference_batch": 64, "reference_lr": 0.1}
    [f] = doctor.findings
    assert f.code == "TD203" and f.step == 2
    ev = f.evidence
    assert ev["effective_batch"] == 256 and ev["accumulation"] == 4
    assert ev["reference_batch"] == 64 and ev["reference_lr"] == 0.1 and ev["peak_lr"] == 0.1
    assert ev["scaling_rule"] == "linear" and ev["recommended_lr"] == pytest.approx(0.4)


def test_watch_reference_keywords_healthy_twin_with_scaled_lr() -> None:
    doctor = _accumulating_run(0.4, reference_batch=64, reference_lr=0.1)
    assert doctor.findings == [] and doctor.step == 2


def test_watch_reference_keywords_merge_with_thresholds_and_reject_bad_values() -> None:
    with traindoctor.watch(thresholds={"TD102.min_wait_share": 0.3}, no_decay=["bias", "bn"], reference_lr=1) as doctor:
        pass
    assert doctor.thresholds == {"TD102.min_wait_share": 0.3, "no_decay": ["bias", "bn"], "reference_lr": 1.0}
    for bad in (
        {"reference_batch": 0},
        {"reference_batch": 6.5},
        {"reference_lr": -0.1},
        {"reference_lr": "0.1"},
        {"no_decay": 3},
        {"no_decay": ["bias", 3]},
    ):
        with pytest.raises(ValueError, match="watch\\(" + next(iter(bad))):
            traindoctor.watch(**bad)  # at the call, before any run starts


# ---------------------------------------------------------------- API shapes
def test_decorator_forms() -> None:
    @traindoctor.watch(select=["TD102"])
    def slow() -> None:
        train(DataLoader(SleepyDataset(24, delay_s=0.003), batch_size=4))

    @traindoctor.watch
    def fast() -> int:
        train(DataLoader(SleepyDataset(8), batch_size=4))
        return 7

    slow()
    assert codes(slow.doctor) == ["TD102"]
    assert fast() == 7
    assert fast.doctor.step == 2


def test_nested_watch_is_inert() -> None:
    with traindoctor.watch(select=["TD102"]) as outer:
        with traindoctor.watch() as inner:
            train(DataLoader(SleepyDataset(24, delay_s=0.003), batch_size=4))
    assert inner.inert and inner.findings == [] and "nested" in inner.notes[0]
    assert codes(outer) == ["TD102"]


def test_session_tracks_steps_backward_calls_models_and_optimizers() -> None:
    seen: list[list[Any]] = []
    with traindoctor.watch() as doctor:
        model, _ = train(
            DataLoader(SleepyDataset(32), batch_size=4),
            accumulation=2,
            on_batch=lambda x: seen.append(list(doctor.optimizers)),
        )
    assert seen[0] == [] and [type(o) for o in seen[-1]] == [torch.optim.SGD]
    assert doctor.step == 4
    assert [r.backward_calls for r in doctor.records] == [2, 2, 2, 2]
    assert [r.batches for r in doctor.records] == [2, 2, 2, 2]
    assert doctor.profile.backward_per_step == 2
    assert list(doctor.models) == [model]
    assert doctor.uses_cuda is False and doctor.device.type in ("cpu", "cuda")


def test_report_dict_shape() -> None:
    with traindoctor.watch(select=["TD102"]) as doctor:
        train(DataLoader(SleepyDataset(24, delay_s=0.003), batch_size=4))
    report = doctor.report_dict()
    assert sorted(report) == ["environment", "findings", "notes", "partial", "profile", "timeline"]
    finding = report["findings"][0]
    assert finding["code"] == "TD102" and finding["origin"] == "runtime"
    assert finding["evidence"]["batches"] == 6 and finding["step"] == 6
    assert report["profile"]["steps"] == 6
    assert report["environment"]["cpu_count"] >= 1


def test_report_platform_string_spawns_no_process(monkeypatch) -> None:
    """platform.platform() runs `uname -p` (a fork in every watched run); ours does not."""
    import platform
    import subprocess

    from traindoctor.runtime.environment import platform_string

    expected = platform.platform()  # before the patch: may run `uname -p` itself

    def no_process(*args, **kwargs):
        raise AssertionError(f"subprocess started: {args!r}")

    monkeypatch.setattr(subprocess.Popen, "__init__", no_process)
    text = platform_string()
    assert text and "--" not in text
    if platform.system() == "Linux" and platform.uname().processor in ("", platform.machine()):
        assert text == expected
