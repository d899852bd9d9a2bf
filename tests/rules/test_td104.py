"""TD104 too-many-workers: runtime."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from helpers.data_loops import SleepyDataset, train
from helpers.rule_loops import codes, finding
from torch.utils.data import DataLoader

import traindoctor
from traindoctor.facts.data import runtime as ev
from traindoctor.rules.data.td104_too_many_workers import TooManyWorkersMonitor
from traindoctor.runtime.records import LoaderInfo

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def test_td104_fires_with_more_workers_than_usable_cores() -> None:
    # three batches: too few to read how busy the workers keep their cores, so they count as busy
    with traindoctor.watch(select=["TD104", "TD603"], cpu_count=2, machine_cores=2) as doctor:
        train(DataLoader(SleepyDataset(12, delay_s=0.003), batch_size=4, num_workers=3))
    f = finding(doctor, "TD104")
    assert f.evidence["concurrent_workers"] == 3
    assert f.evidence["usable_cores"] == 2
    # the pipeline model's ceiling (tune's): the cores the training process leaves the workers,
    # all of them when it mostly waits for data, one when it computes (a loaded machine slows it)
    budget = f.evidence["recommended_total_workers"]
    assert budget == ev.worker_budget(doctor) in (1, 2)
    reason = "mostly waits for data" if budget == 2 else "one core stays for the training process"
    assert (
        f"Use at most {budget} worker{'s' if budget > 1 else ''} in total ({'the training process ' if budget == 2 else ''}"
        in f.message
    )
    assert reason in f.message
    assert codes(doctor) == ["TD104"]


def _ran(loader_info: LoaderInfo, ran_ms: float, queued_ms: float, batches: int) -> None:
    """Workers that ran ``ran_ms`` and waited ``queued_ms`` for a core per batch (one reading)."""
    loader_info.worker_cpu.start((1,), 0)
    loader_info.worker_cpu._last = (ran_ms * batches / 1000.0, queued_ms * batches / 1000.0)
    loader_info.worker_cpu._last_batches = batches


def _session_with(loader_info: LoaderInfo, cores: int) -> SimpleNamespace:
    return SimpleNamespace(
        loaders=[loader_info],
        cpu_count=cores,
        machine_cores=cores,
        local_world_size=1,
        step=40,
        thresholds={},
        training_loaders=lambda: [loader_info],
    )


def _loader(workers: int, wait_ms: float, compute_ms: float, batches: int = 40) -> LoaderInfo:
    info = LoaderInfo(1, workers, False, True, 4, 2, False, "Images", 160, False, "RandomSampler", "train.py", 9)
    info.feeds_training = True
    info.open_epoch(0.0, spawned=True)
    info.spawns = 1
    info.max_concurrent_workers = workers
    for i in range(batches):
        t = (i + 1) * (wait_ms + compute_ms) / 1000.0
        info.add_batch(wait_ms / 1000.0, t)
    info.close_epoch()
    return info


@pytest.mark.parametrize(
    ("ran_ms", "queued_ms", "fires"),
    [(1.0, 0.5, False), (30.0, 1.0, True), (12.0, 20.0, True)],
    ids=["sleeping-workers", "decoding-workers", "queued-for-a-core"],
)
def test_td104_judges_workers_beyond_the_cores_by_how_busy_they_keep_a_core(
    ran_ms: float, queued_ms: float, fires: bool
) -> None:
    # 3 workers on 2 cores, the loop waits 10 of each 11 ms for them: a worker takes 33 ms per
    # batch. Loading that runs 1 of them mostly sleeps (I/O): more workers than cores fit (up to
    # 2 per core), no finding. Decoding runs 30 of them: busy workers, at most the cores. One
    # that ran 12 ms and waited 20 for a core on a busy machine is busy too (12 of the 13 it could)
    info = _loader(workers=3, wait_ms=10.0, compute_ms=1.0)
    _ran(info, ran_ms, queued_ms, batches=40)
    monitor = TooManyWorkersMonitor(_session_with(info, cores=2))  # type: ignore[arg-type]  # a stand-in session
    monitor.on_run_end()
    assert [f.code for f in monitor.findings] == (["TD104"] if fires else [])
    if fires:
        assert monitor.findings[0].evidence["recommended_total_workers"] == 2  # the loop mostly waits


def test_td104_silent_within_the_cores() -> None:
    with traindoctor.watch(select=["TD104", "TD603"], cpu_count=2, machine_cores=2) as doctor:
        train(DataLoader(SleepyDataset(12), batch_size=4, num_workers=1))
    assert codes(doctor) == []


def _gan_with_sampling_loader() -> None:
    """PyTorch-GAN's cyclegan shape: a training loader with workers, and a sample loader whose
    ``next(iter(...))`` every few batches starts one more worker while the training workers run."""
    from helpers.data_loops import make_model

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    dataloader = DataLoader(SleepyDataset(16), batch_size=4, shuffle=True, num_workers=2)  # TRAIN LOADER
    val_dataloader = DataLoader(SleepyDataset(8), batch_size=4, shuffle=True, num_workers=1)  # SAMPLE LOADER
    model = make_model(8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        for i, (x, y) in enumerate(dataloader):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i % 2 == 0:
                model.eval()
                with torch.no_grad():
                    sample, _ = next(iter(val_dataloader))
                    model(sample)
                model.train()


def test_td104_lands_on_the_loader_with_the_workers_not_the_sampling_loader_started_last() -> None:
    from helpers.rule_loops import line_of

    with traindoctor.watch(select=["TD104", "TD603"], cpu_count=2, machine_cores=2) as doctor:
        _gan_with_sampling_loader()
    f = finding(doctor, "TD104")
    assert f.evidence["concurrent_workers"] == 3
    assert f.location is not None and f.location.row == line_of("# TRAIN LOADER", _gan_with_sampling_loader)
    assert f.location.row != line_of("# SAMPLE LOADER", _gan_with_sampling_loader)


def test_td104_lands_on_the_evaluation_loader_when_it_holds_the_most_workers() -> None:
    from helpers.rule_loops import line_of

    def run() -> None:
        train_loader = DataLoader(SleepyDataset(16), batch_size=4, num_workers=1, persistent_workers=True)
        val_loader = DataLoader(SleepyDataset(8), batch_size=4, num_workers=3)  # VAL LOADER
        for _ in range(2):
            train(train_loader)
            for _batch in val_loader:
                pass

    with traindoctor.watch(select=["TD104", "TD603"], cpu_count=2, machine_cores=2) as doctor:
        run()
    f = finding(doctor, "TD104")
    assert f.location is not None and f.location.row == line_of("# VAL LOADER", run)
