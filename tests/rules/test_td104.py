"""TD104 too-many-workers: runtime."""

from __future__ import annotations

import pytest
from helpers.data_loops import SleepyDataset, train
from helpers.rule_loops import codes, finding
from torch.utils.data import DataLoader

import traindoctor

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


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
