"""loader_kwargs: worker counts for 1, 2 and 8 local ranks, pinning, tuned files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset

from traindoctor.recipes import data as recipe_data
from traindoctor.recipes import loader_kwargs, seed_everything, worker_init_fn


class Squares(Dataset):
    """A map-style dataset that computes its items (the case workers are for)."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([index * index], dtype=torch.float32)


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(4))


@pytest.fixture
def cores(monkeypatch: pytest.MonkeyPatch):
    def set_cores(n: int) -> None:
        monkeypatch.setattr(recipe_data, "usable_cores", lambda: n)

    return set_cores


@pytest.mark.parametrize(
    ("machine_cores", "ranks", "workers"),
    [
        (16, 1, 8),  # 15 would fit; capped at MAX_DEFAULT_WORKERS
        (16, 2, 7),  # 16 // 2 - 1
        (16, 8, 1),  # 16 // 8 - 1
        (8, 1, 7),
        (8, 2, 3),
        (8, 8, 0),  # one core per rank: the main process needs it
        (2, 1, 1),
        (1, 1, 0),
    ],
)
def test_workers_for_local_ranks(cores, machine_cores: int, ranks: int, workers: int) -> None:
    cores(machine_cores)
    kw = loader_kwargs(Squares(), device="cpu", local_world_size=ranks)
    assert kw == {"num_workers": workers, "pin_memory": False, "persistent_workers": workers > 0}


def test_local_ranks_come_from_torchrun_environment(cores, monkeypatch: pytest.MonkeyPatch) -> None:
    cores(16)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert loader_kwargs(device="cpu")["num_workers"] == 1
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert loader_kwargs(device="cpu")["num_workers"] == 7
    assert loader_kwargs(device="cpu", local_world_size=1)["num_workers"] == 8  # the argument wins


def test_usable_cores_reads_the_affinity_mask() -> None:
    import os

    assert recipe_data.usable_cores() == len(os.sched_getaffinity(0))


def test_pin_memory_only_for_cuda(cores) -> None:
    cores(4)
    assert loader_kwargs(device="cuda")["pin_memory"] is True
    assert loader_kwargs(device=torch.device("cuda", 1))["pin_memory"] is True
    assert loader_kwargs(device="cpu")["pin_memory"] is False
    if not torch.cuda.is_available():
        assert loader_kwargs()["pin_memory"] is False


def test_in_memory_and_iterable_datasets_stay_in_the_main_process(cores) -> None:
    cores(16)
    tensors = TensorDataset(torch.zeros(4, 2))
    assert loader_kwargs(tensors, device="cpu") == {"num_workers": 0, "pin_memory": False, "persistent_workers": False}
    assert loader_kwargs(Stream(), device="cpu")["num_workers"] == 0


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="local_world_size"):
        loader_kwargs(local_world_size=0)
    with pytest.raises(ValueError, match="loader_kwargs: not a device"):
        loader_kwargs(device="gpu")


def write(tmp_path: Path, document: object) -> Path:
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_tuned_file_overrides_the_computed_values(cores, tmp_path: Path) -> None:
    cores(16)
    path = write(
        tmp_path, {"recommended": {"num_workers": 3, "prefetch_factor": 4, "pin_memory": True}, "measured": {}}
    )
    kw = loader_kwargs(Squares(), device="cpu", tuned=path)
    assert kw == {"num_workers": 3, "pin_memory": True, "persistent_workers": True, "prefetch_factor": 4}
    assert loader_kwargs(Squares(), device="cpu", tuned=str(path)) == kw
    assert loader_kwargs(Squares(), device="cpu", tuned=json.loads(path.read_text())) == kw


def test_tuned_zero_workers_stays_consistent(cores, tmp_path: Path) -> None:
    cores(16)
    path = write(tmp_path, {"recommended": {"num_workers": 0, "prefetch_factor": 2, "persistent_workers": True}})
    kw = loader_kwargs(Squares(), device="cpu", tuned=path)
    assert kw == {"num_workers": 0, "pin_memory": False, "persistent_workers": False}
    DataLoader(Squares(), **kw)  # DataLoader accepts it


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"recommended": {"batch_size": 64}}, "not a DataLoader option"),
        ({"recommended": {"num_workers": "4"}}, "wrong type"),
        ({"recommended": {"num_workers": True}}, "wrong type"),
        ({"recommended": {"num_workers": -2}}, "out of range"),
        ({"recommended": {"prefetch_factor": 0}}, "out of range"),
        ({"measured": {}}, "no 'recommended' object"),
        ([1, 2], "no 'recommended' object"),
    ],
)
def test_bad_tuned_files_are_clear_errors(tmp_path: Path, document: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        loader_kwargs(device="cpu", tuned=write(tmp_path, document))


def test_missing_or_broken_tuned_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        loader_kwargs(tuned=tmp_path / "nope.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not valid JSON"):
        loader_kwargs(tuned=broken)


def test_worker_init_fn_only_after_seeding_workers(cores) -> None:
    cores(4)
    assert "worker_init_fn" not in loader_kwargs(Squares(), device="cpu")
    seed_everything(3)
    assert loader_kwargs(Squares(), device="cpu")["worker_init_fn"] is worker_init_fn
    assert "worker_init_fn" not in loader_kwargs(TensorDataset(torch.zeros(2)), device="cpu")
    seed_everything(3, workers=False)
    assert "worker_init_fn" not in loader_kwargs(Squares(), device="cpu")


def test_kwargs_drive_a_real_loader(cores) -> None:
    cores(2)  # one worker
    kw = loader_kwargs(Squares(), device="cpu")
    assert kw["num_workers"] == 1
    loader = DataLoader(Squares(), batch_size=4, **kw)
    for _ in range(2):  # two epochs through the same persistent worker
        assert torch.cat(list(loader)).flatten().tolist() == [float(i * i) for i in range(12)]
