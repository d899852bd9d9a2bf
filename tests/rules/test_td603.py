"""TD603 workers-per-rank: runtime."""

from __future__ import annotations

import pytest
from helpers.data_loops import SleepyDataset, train
from helpers.rule_loops import codes, finding
from torch.utils.data import DataLoader

import traindoctor

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


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
