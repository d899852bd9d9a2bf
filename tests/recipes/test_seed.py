"""seed_everything and worker_init_fn: reproducible, distinct streams per worker and per rank."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from traindoctor.recipes import data as recipe_data
from traindoctor.recipes import loader_kwargs, seed_everything, worker_init_fn


def draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), torch.rand(()).item()


def test_seed_everything_seeds_python_numpy_and_torch() -> None:
    assert seed_everything(123) == 123
    first = [draws() for _ in range(3)]
    seed_everything(123)
    assert [draws() for _ in range(3)] == first
    seed_everything(124)
    assert [draws() for _ in range(3)] != first


@pytest.mark.parametrize("bad", [-1, 2**63, 1.5, True, "1"])
def test_bad_seeds(bad: object) -> None:
    with pytest.raises(ValueError, match="seed"):
        seed_everything(bad)  # type: ignore[arg-type]


def test_large_seeds_are_accepted() -> None:
    seed_everything(2**40 + 5)
    assert torch.initial_seed() == 2**40 + 5


class RandomAugment(Dataset):
    """Every item draws from all three generators, as an augmentation pipeline would."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[int, int, float, float, float]:
        info = torch.utils.data.get_worker_info()
        return (index, info.id if info else -1, *draws())


def run_epoch(monkeypatch: pytest.MonkeyPatch, seed: int, rank: int | None = None, seed_workers: bool = True):
    if rank is not None:
        monkeypatch.setenv("RANK", str(rank))  # inherited by the worker processes
    monkeypatch.setattr(recipe_data, "usable_cores", lambda: 3)  # two workers
    seed_everything(seed, workers=seed_workers)
    kw = loader_kwargs(RandomAugment(), device="cpu")
    assert kw["num_workers"] == 2
    kw["persistent_workers"] = False  # one epoch; nothing to keep alive
    loader = DataLoader(RandomAugment(), batch_size=None, **kw)
    return list(loader)


def test_worker_streams_are_reproducible_and_distinct(monkeypatch: pytest.MonkeyPatch) -> None:
    first = run_epoch(monkeypatch, 7)
    again = run_epoch(monkeypatch, 7)
    assert first == again
    by_worker = {w: [item[2:] for item in first if item[1] == w] for w in (0, 1)}
    assert len(by_worker[0]) == len(by_worker[1]) == 4
    for a, b in zip(by_worker[0], by_worker[1]):
        assert all(x != y for x, y in zip(a, b))  # every generator differs between the workers
    assert run_epoch(monkeypatch, 8) != first


def test_ranks_get_distinct_worker_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    rank0 = run_epoch(monkeypatch, 7, rank=0)
    rank1 = run_epoch(monkeypatch, 7, rank=1)
    assert rank1 == run_epoch(monkeypatch, 7, rank=1)
    values0 = {v for item in rank0 for v in item[2:]}
    values1 = {v for item in rank1 for v in item[2:]}
    assert not values0 & values1
    # Without worker_init_fn, equally seeded ranks draw identical augmentations: the problem it solves.
    plain0 = run_epoch(monkeypatch, 7, rank=0, seed_workers=False)
    plain1 = run_epoch(monkeypatch, 7, rank=1, seed_workers=False)
    assert [item[2:] for item in plain0] == [item[2:] for item in plain1]
    # On rank 0 the torch and random streams are PyTorch's own (only NumPy is reseeded).
    assert [(i[0], i[2], i[4]) for i in rank0] == [(i[0], i[2], i[4]) for i in plain0]


def test_worker_init_fn_outside_a_worker_is_deterministic(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    torch.manual_seed(11)
    worker_init_fn(0)
    first = draws()
    torch.manual_seed(11)
    worker_init_fn(0)
    assert draws() == first
