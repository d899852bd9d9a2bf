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
