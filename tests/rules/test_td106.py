"""TD106 worker-memory-copy: runtime."""

from __future__ import annotations

import pytest
import torch
from helpers.data_loops import SleepyDataset, train
from helpers.rule_loops import codes, finding
from torch.utils.data import DataLoader

import traindoctor

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


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
