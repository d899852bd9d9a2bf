"""TD102 loader-in-main-process: static and runtime.

Where the zero comes from, in-memory datasets (also through project modules, helper
returns, partial, random_split, branches and parameters) that need no workers, loaders
built by lambdas; at run time the measured data wait, and loaders that only evaluate.
"""

from __future__ import annotations

import pytest
import torch
from helpers.data_loops import MiniTrainer, SleepyDataset, evaluate_fresh_loader, fast_dataset, train
from helpers.project_tree import checked_rows
from helpers.rule_loops import codes, finding, line_of
from helpers.snippets import data_check, data_rows
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import traindoctor

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


# ------------------------------------------------------------------ traindoctor check
def test_td102_messages_say_where_zero_comes_from():
    src = """
    import argparse
    import torch
    p = argparse.ArgumentParser()
    p.add_argument("--num-workers", type=int, default=0)
    args = p.parse_args()
    a = torch.utils.data.DataLoader(ds, num_workers=args.num_workers)
    b = torch.utils.data.DataLoader(ds)
    loss.backward()
    """
    a, b = data_check(src, ["TD102"]).findings
    assert (a.location.row, b.location.row) == (7, 8)
    assert "default of `--num-workers`" in a.message
    assert "defaults to 0" in b.message


def test_td102_silent_for_cheap_in_memory_dataset_class():
    src = """
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Random(Dataset):
        def __init__(self, n):
            self.data = torch.randn(n, 32)
        def __getitem__(self, i):
            return self.data[i]

    class Images(Dataset):
        def __getitem__(self, i):
            return load_image(self.paths[i])

    a = DataLoader(Random(64))
    b = DataLoader(Images())
    loss.backward()
    """
    assert data_rows(src, ["TD102"]) == [("TD102", 16)]


LAMBDA_FACTORY = """
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset


class RandomDataset(Dataset):
    def __init__(self, size, length):
        self.data = torch.randn(length, size)

    def __getitem__(self, index):
        return self.data[index]

    def __len__(self):
        return len(self.data)


class RandomIterable(IterableDataset):
    def __iter__(self):
        yield torch.randn(4)


class DataModule:
    def setup(self):
        self.train_datasets = [{first}, {second}]

    def train_dataloader(self):
        return apply_to_collection(self.train_datasets, Dataset, lambda x: DataLoader(x))

    def training_step(self, batch, batch_idx):
        return self.model(batch).sum()
"""


def test_lambda_factory_over_in_memory_datasets_is_silent():
    src = LAMBDA_FACTORY.format(first="RandomDataset(4, 16)", second="RandomIterable()")
    assert data_rows(src, ["TD102"]) == []


def test_lambda_factory_over_file_backed_datasets_fires():
    src = LAMBDA_FACTORY.format(first="RandomDataset(4, 16)", second="ImageFolder('/data/train')")
    assert data_rows(src, ["TD102"]) == [("TD102", 27)]


def test_lambda_factory_over_unknown_collection_fires():
    src = """
    from torch.utils.data import DataLoader
    def train_dataloader(datasets):
        return list(map(lambda d: DataLoader(d, batch_size=32), datasets))
    def training_step(model, batch):
        return model(batch).sum()
    """
    assert data_rows(src, ["TD102"]) == [("TD102", 4)]


DATAUTILS = """
import torch
from torch.utils.data import Dataset


class MyTrainDataset(Dataset):
    def __init__(self, size):
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]


class ImageFiles(Dataset):
    def __init__(self, paths):
        self.paths = paths

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        return torch.load(self.paths[index])
"""


DDP_SCRIPT = """
import torch
from torch.utils.data import DataLoader
from datautils import {cls}

model = torch.nn.Linear(20, 1).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
train_data = DataLoader({cls}({arg}), batch_size=32, pin_memory=True)
for epoch in range(10):
    for source, targets in train_data:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(source.cuda()), targets.cuda()).backward()
        optimizer.step()
"""


def test_an_in_memory_dataset_of_another_project_module_needs_no_workers(tmp_path):
    files = {
        "datautils.py": DATAUTILS,
        "train.py": DDP_SCRIPT.format(cls="MyTrainDataset", arg="2048"),
        "pyproject.toml": "",
    }
    assert checked_rows(tmp_path, files, "train.py", ["TD102"]) == []


def test_a_file_reading_dataset_of_another_project_module_still_needs_workers(tmp_path):
    files = {
        "datautils.py": DATAUTILS,
        "train.py": DDP_SCRIPT.format(cls="ImageFiles", arg="paths"),
        "pyproject.toml": "",
    }
    assert checked_rows(tmp_path, files, "train.py", ["TD102"]) == [("TD102", 7)]


WINDOWS = """
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class RandomWindows(Dataset):
    def __init__(self, series, context_len):
        self.series = series
        self.context_len = context_len

    def __len__(self):
        return len(self.series)

    def __getitem__(self, i):
        ts = self.series[i]
        return torch.tensor(ts[: self.context_len], dtype=torch.float32), torch.flip(ts, dims=(0,))


class Decoded(Dataset):
    def __init__(self, files):
        self.files = files

    def __getitem__(self, i):
        return torch.tensor(np.load(self.files[i]))


model = torch.nn.Linear(64, 1).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
loader = DataLoader({dataset}, batch_size=32, shuffle=True, pin_memory=True)
for epoch in range(3):
    for x, y in loader:
        optimizer.zero_grad()
        model(x.cuda()).sum().backward()
        optimizer.step()
"""


def test_slices_wrapped_in_torch_tensor_are_in_memory(tmp_path):
    source = WINDOWS.format(dataset="RandomWindows(series, 64)")
    assert checked_rows(tmp_path, {"train.py": source}, "train.py", ["TD102"]) == []


def test_a_getitem_that_loads_from_disk_is_not_in_memory(tmp_path):
    source = WINDOWS.format(dataset="Decoded(files)")
    assert checked_rows(tmp_path, {"train.py": source}, "train.py", ["TD102"]) == [("TD102", 29)]


PARTIAL = """
from functools import partial

import torch
from torch.utils import data


class ReverseDataset(data.Dataset):
    def __init__(self, num_categories, seq_len, size):
        self.data = torch.randint(num_categories, size=(size, seq_len))

    def __len__(self):
        return self.data.size(0)

    def __getitem__(self, idx):
        inp = self.data[idx]
        return inp, torch.flip(inp, dims=(0,))


dataset = partial(ReverseDataset, 10, 16)
train_loader = data.DataLoader(dataset(50000), batch_size=128, shuffle=True, pin_memory=True)
model = torch.nn.Embedding(10, 10).cuda()
optimizer = torch.optim.Adam(model.parameters())
for epoch in range(10):
    for x, y in train_loader:
        optimizer.zero_grad()
        model(x.cuda()).sum().backward()
        optimizer.step()
"""


def test_a_partial_of_an_in_memory_dataset_class_is_in_memory(tmp_path):
    assert checked_rows(tmp_path, {"train.py": PARTIAL}, "train.py", ["TD102"]) == []


BRANCHES = """
import datasets
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(256, 1).cuda()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-5)
if use_real_data:
    ds = datasets.load_dataset("HuggingFaceH4/ultrachat_200k", split="train_sft")
    ds = ds.map(convert)
    dl = DataLoader(ds, batch_size=1, pin_memory=True)
else:
    ds = TensorDataset(torch.arange(4096).view(-1, 256))
    dl = DataLoader(ds, batch_size=1, pin_memory=True)
for epoch in range(2):
    for batch in dl:
        optimizer.zero_grad()
        model(batch[0].float().cuda()).sum().backward()
        optimizer.step()
"""


def test_a_name_rebound_to_a_tensor_dataset_in_its_branch_is_in_memory(tmp_path):
    # Row 10 (the real dataset) is reported, row 13 (the fake TensorDataset) is not.
    assert checked_rows(tmp_path, {"train.py": BRANCHES}, "train.py", ["TD102"]) == [("TD102", 10)]


PARAMETER = """
import torch
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Linear(128, 10).cuda()


def train_logreg(train_feats_data, max_epochs=100):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    loader = DataLoader(train_feats_data, batch_size=64, shuffle=True, pin_memory=True)
    for epoch in range(max_epochs):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x.cuda()), y.cuda()).backward()
            optimizer.step()


train_logreg({dataset})
"""


def test_a_parameter_every_caller_fills_with_a_tensor_dataset_is_in_memory(tmp_path):
    source = PARAMETER.format(dataset="TensorDataset(feats, labels)")
    assert checked_rows(tmp_path, {"train.py": source}, "train.py", ["TD102"]) == []
    source = PARAMETER.format(dataset="ImageFolder(root)")
    assert checked_rows(tmp_path, {"train.py": source}, "train.py", ["TD102"]) == [("TD102", 9)]


RETURNED = """
import torch
from torch.utils.data import DataLoader, TensorDataset
from datautils import {cls}


def load_train_objs():
    train_set = {cls}(2048)
    model = torch.nn.Linear(20, 1).cuda()
    return train_set, model, torch.optim.SGD(model.parameters(), lr=1e-3)


def prepare_features(model, n):
    feats = torch.randn(n, 20)
    return TensorDataset(feats, model(feats).detach())


def prepare_dataloader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, pin_memory=True)


dataset, model, optimizer = load_train_objs()
train_data = prepare_dataloader(dataset, 32)
feats_loader = DataLoader(prepare_features(model, 512), batch_size=64, pin_memory=True)
for epoch in range(10):
    for source, targets in train_data:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(source.cuda()), targets.cuda()).backward()
        optimizer.step()
    for x, y in feats_loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()).backward()
        optimizer.step()
"""


def test_datasets_returned_by_helpers_are_followed_to_their_class(tmp_path):
    files = {"datautils.py": DATAUTILS, "train.py": RETURNED.format(cls="MyTrainDataset"), "pyproject.toml": ""}
    assert checked_rows(tmp_path, files, "train.py", ["TD102"]) == []
    # The same helper returning a dataset that reads files: its loader is reported.
    files["train.py"] = RETURNED.format(cls="ImageFiles")
    assert checked_rows(tmp_path, files, "train.py", ["TD102"]) == [("TD102", 18)]


LIGHTNING_DEMO = """
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, random_split

import lightning as L
from lightning.pytorch.demos import Transformer, WikiText2
from torchvision.datasets import ImageFolder


def get_dataloaders(dataset):
    n = len(dataset)
    train_dataset, val_dataset = random_split(dataset, [n - 2000, 2000])
    return DataLoader(train_dataset, batch_size=16, shuffle=True), DataLoader(val_dataset, batch_size=16)


def main():
    fabric = L.Fabric(accelerator="cuda")
    dataset = {dataset}
    train_dataloader, val_dataloader = get_dataloaders(dataset)
    model = Transformer(vocab_size=dataset.vocab_size)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = fabric.setup(model, optimizer)
    train_dataloader = fabric.setup_dataloaders(train_dataloader)
    for epoch in range(20):
        for input, target in train_dataloader:
            optimizer.zero_grad()
            fabric.backward(F.nll_loss(model(input, target), target.view(-1)))
            optimizer.step()


main()
"""


def test_lightning_demo_datasets_are_in_memory_through_random_split(tmp_path):
    source = LIGHTNING_DEMO.format(dataset="WikiText2()")
    assert checked_rows(tmp_path, {"train.py": source}, "train.py", ["TD102"]) == []
    source = LIGHTNING_DEMO.format(dataset='ImageFolder("data/train")')
    assert checked_rows(tmp_path, {"train.py": source}, "train.py", ["TD102"]) == [("TD102", 13)]


# ------------------------------------------------------------------ traindoctor run
def test_td102_fires_when_main_process_loading_dominates() -> None:
    with traindoctor.watch(select=["TD102"], cpu_count=4, machine_cores=4) as doctor:
        loader = DataLoader(SleepyDataset(48, delay_s=0.003), batch_size=4)  # line of the finding
        train(loader)
    f = finding(doctor, "TD102")
    assert f.filename == __file__
    assert f.location is not None and f.location.row == line_of("line of the finding")
    ev = f.evidence
    assert ev["data_wait_share"] > 0.2
    assert ev["wait_ms_per_batch"] >= 10.0  # 4 samples x 3 ms of sleep
    assert ev["batches"] == 12
    # sleeping needs no CPU, so the pipeline model lets workers use all 4 cores, up to two per core
    assert ev["load_cpu_ms_per_batch"] < ev["wait_ms_per_batch"] / 2
    assert 2 <= ev["recommended_num_workers"] <= 2 * 4
    assert ev["predicted_speedup"] > 1.5
    assert "num_workers=" in f.message


def test_td102_on_two_cores_recommends_the_workers_that_beat_the_main_process() -> None:
    # The README demo's shape: sleepy loading, a cheap model, 2 cores. One worker only moves the
    # same wait into a process (no faster than 0); workers that mostly sleep fit two per core
    # beside a training process that mostly waits (4 on a quiet machine; a loaded one slows the
    # training process's own steps and leaves them fewer cores)
    with traindoctor.watch(select=["TD102"], cpu_count=2, machine_cores=2) as doctor:
        train(DataLoader(SleepyDataset(48, delay_s=0.003), batch_size=4))
    f = finding(doctor, "TD102")
    workers = f.evidence["recommended_num_workers"]
    assert 2 <= workers <= 4
    assert f"`num_workers={workers}`" in f.message and "predicted" in f.message
    low, high = f.evidence["predicted_speedup_range"]
    assert low <= high == f.evidence["predicted_speedup"]
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


@pytest.mark.parametrize("max_batches", [None, 8])
def test_td102_silent_on_a_slow_eval_only_loader(max_batches) -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def every_10(trainer: MiniTrainer) -> None:
        if trainer.iter_num % 10 == 0:
            model.eval()
            evaluate_fresh_loader(model, delay_s=0.003, max_batches=max_batches)
            model.train()

    with traindoctor.watch(select=["TD102"], cpu_count=4, machine_cores=4) as doctor:
        MiniTrainer(model, fast_dataset(), every_10, iters=25).run()
    assert codes(doctor) == []
    by_role = {info.feeds_training: info for info in doctor.loaders if info.batches}
    assert by_role[True].batches == 25  # the training loader, one batch per step
    evals = [info for info in doctor.loaders if not info.feeds_training]
    assert len(evals) == 3 and all(info.batches >= 8 for info in evals)  # iterations 0, 10, 20
    # the same eval loader, were it judged, is slow enough for TD102: the silence is by role
    info = evals[0]
    assert info.wait_s / info.active_s > 0.2 and 1000 * info.wait_s / info.batches > 5


def test_td102_still_fires_on_the_slow_training_loader_beside_an_eval_loader() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def every_10(trainer: MiniTrainer) -> None:
        if trainer.iter_num % 10 == 0:
            evaluate_fresh_loader(model, delay_s=0.0, max_batches=2)

    with traindoctor.watch(select=["TD102"], cpu_count=4, machine_cores=4) as doctor:
        trainer = MiniTrainer(model, SleepyDataset(48, delay_s=0.003), every_10, iters=15)
        trainer.run()
    f = finding(doctor, "TD102")
    assert f.evidence["batches"] == 15
    assert f.location.row == MiniTrainer.__init__.__code__.co_firstlineno + 2  # the trainer's loader


def test_a_run_that_never_trains_still_judges_its_loader() -> None:
    """No backward, no optimizer step (a loading benchmark): every loader is the pipeline."""
    with traindoctor.watch(select=["TD102"], cpu_count=4, machine_cores=4) as doctor:
        for x, y in DataLoader(SleepyDataset(48, delay_s=0.003), batch_size=4):
            torch.tanh(x).sum()
    assert codes(doctor) == ["TD102"]
