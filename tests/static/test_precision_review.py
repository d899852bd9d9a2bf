"""Wrong findings of the precision review (README "Precision"), fixed by class.

Each test is a tiny fixture written the way the reviewed code was written (a course notebook that
peeks at one batch, a DDP tutorial whose dataset lives in ``datautils.py``, a Flax notebook, a
torch test that saves an optimizer state, an IPython cell with ``torch.*Tensor?``), with the
negative next to it: the same shape where the finding is right must still be reported.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from traindoctor.check.engine import check_source, instantiate
from traindoctor.check.notebook import read_notebook
from traindoctor.cli import main
from traindoctor.config import Settings


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def findings(root: Path, files: dict[str, str], target: str, codes: list[str]) -> list[tuple[str, int]]:
    write(root, files)
    path = root / target
    result = check_source(path.read_bytes(), str(path), Settings(min_torch_version="2.13"), instantiate(codes))
    assert not result.internal_errors, result.internal_errors
    return [(f.code, f.location.row) for f in result.findings]


# ------------------------------------------------------------------ a loader only peeked at

PEEK = """
import torch
from torch import nn, optim
from torch.utils import data
from torchvision.datasets import FashionMNIST

device = torch.device("cuda")
train_set = FashionMNIST("data", train=True, download=True)
model = nn.Linear(784, 10).to(device)


def visualize_gradients(net):
    net.eval()
    small_loader = data.DataLoader(train_set, batch_size=1024, shuffle=False)
    imgs, labels = next(iter(small_loader))
    imgs, labels = imgs.to(device), labels.to(device)
    loss = nn.functional.cross_entropy(net(imgs), labels)
    loss.backward()


def train_model(net, max_epochs=10):
    optimizer = optim.SGD(net.parameters(), lr=1e-2, momentum=0.9)
    train_loader_local = data.DataLoader(train_set, batch_size=256, shuffle=True, pin_memory=True)
    for epoch in range(max_epochs):
        for imgs, labels in train_loader_local:
            optimizer.zero_grad()
            nn.functional.cross_entropy(net(imgs.to(device)), labels.to(device)).backward()
            optimizer.step()


visualize_gradients(model)
train_model(model)
"""


def test_a_loader_used_once_for_next_iter_is_not_a_training_loader(tmp_path):
    got = findings(tmp_path, {"train.py": PEEK}, "train.py", ["TD101", "TD102", "TD206"])
    # The peeked loader (row 13) gets nothing; the loader that trains (row 22) is still reported.
    assert got == [("TD102", 22)]


def test_next_iter_repeated_by_a_loop_is_still_training(tmp_path):
    source = PEEK.replace(
        "        for imgs, labels in train_loader_local:\n",
        "        for step in range(100):\n            imgs, labels = next(iter(train_loader_local))\n",
    )
    got = findings(tmp_path, {"train.py": source}, "train.py", ["TD102"])
    assert ("TD102", 22) in got


def test_a_peeked_loader_that_is_also_trained_on_is_reported(tmp_path):
    source = PEEK.replace(
        "train_loader_local = data.DataLoader(train_set, batch_size=256, shuffle=True, pin_memory=True)",
        "train_loader_local = small_peek = data.DataLoader(train_set, batch_size=256, shuffle=True, pin_memory=True)",
    )
    source = source.replace(
        "    for epoch in range(max_epochs):\n",
        "    print(next(iter(small_peek)))\n    for epoch in range(max_epochs):\n",
    )
    got = findings(tmp_path, {"train.py": source}, "train.py", ["TD102"])
    assert ("TD102", 22) in got


# ------------------------------------------------------------------ in-memory datasets

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
    assert findings(tmp_path, files, "train.py", ["TD102"]) == []


def test_a_file_reading_dataset_of_another_project_module_still_needs_workers(tmp_path):
    files = {
        "datautils.py": DATAUTILS,
        "train.py": DDP_SCRIPT.format(cls="ImageFiles", arg="paths"),
        "pyproject.toml": "",
    }
    assert findings(tmp_path, files, "train.py", ["TD102"]) == [("TD102", 7)]


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
    assert findings(tmp_path, {"train.py": source}, "train.py", ["TD102"]) == []


def test_a_getitem_that_loads_from_disk_is_not_in_memory(tmp_path):
    source = WINDOWS.format(dataset="Decoded(files)")
    assert findings(tmp_path, {"train.py": source}, "train.py", ["TD102"]) == [("TD102", 29)]


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
    assert findings(tmp_path, {"train.py": PARTIAL}, "train.py", ["TD102"]) == []


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
    assert findings(tmp_path, {"train.py": BRANCHES}, "train.py", ["TD102"]) == [("TD102", 10)]


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
    assert findings(tmp_path, {"train.py": source}, "train.py", ["TD102"]) == []
    source = PARAMETER.format(dataset="ImageFolder(root)")
    assert findings(tmp_path, {"train.py": source}, "train.py", ["TD102"]) == [("TD102", 9)]


# ------------------------------------------------------------------ evaluation in JAX programs

FLAX = """
import jax
import flax
from flax.training.common_utils import shard

parallel_eval_step = jax.pmap(eval_step, "batch")
eval_metrics = []
for batch in eval_loader:
    model_inputs = shard(batch)
    eval_metrics.append(parallel_eval_step(state.params, model_inputs))
"""


def test_a_flax_evaluation_loop_is_not_a_pytorch_evaluation(tmp_path):
    assert findings(tmp_path, {"eval.py": FLAX}, "eval.py", ["TD701", "TD702"]) == []


def test_the_same_loop_over_a_torch_model_is_reported(tmp_path):
    source = FLAX.replace("import jax\nimport flax\n", "import torch\nimport jax\n")
    assert findings(tmp_path, {"eval.py": source}, "eval.py", ["TD702"]) == [("TD702", 9)]


# ------------------------------------------------------------------ saves in test code

ROUND_TRIP = """
import torch


def _test_optimizer_step_reload(self, chkpt_file):
    model = torch.nn.Linear(2, 4).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.03)
    for _ in range(20):
        opt.zero_grad()
        model(torch.randn(4, 2).cuda()).sum().backward()
        opt.step()
    torch.save({"optimizer_state_dict": opt.state_dict()}, chkpt_file)
    checkpoint = torch.load(chkpt_file)
    opt.load_state_dict(checkpoint["optimizer_state_dict"])


def test_amp(self):
    scaler = torch.amp.GradScaler("cuda")
"""


def test_a_save_load_round_trip_in_a_test_file_is_no_training_checkpoint(tmp_path):
    files = {"testing/distributed_test.py": ROUND_TRIP}
    assert findings(tmp_path, files, "testing/distributed_test.py", ["TD501", "TD503", "TD504"]) == []


def test_the_same_save_in_a_training_script_is_reported(tmp_path):
    got = findings(tmp_path, {"train.py": ROUND_TRIP}, "train.py", ["TD503", "TD504"])
    assert ("TD504", 11) in got and ("TD503", 11) in got


# ------------------------------------------------------------------ IPython cells


def notebook(*sources: str) -> str:
    cells = [{"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [], "source": s} for s in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


def run(capsys, *argv: str) -> tuple[int, str]:
    code = main(["check", "--min-torch-version", "2.13", "--no-cache", *argv])
    out, _ = capsys.readouterr()
    return code, out


def test_wildcard_help_is_ipython_syntax_not_a_syntax_error(tmp_path, capsys):
    nb = tmp_path / "tensors.ipynb"
    nb.write_text(
        notebook("import torch\n", "# all the tensor types\ntorch.*Tensor?\n", "scaler = torch.cuda.amp.GradScaler()\n")
    )
    code, out = run(capsys, str(nb))
    assert "TD000" not in out
    assert f"{nb}:cell 3:1:10: TD304" in out and code == 1


def test_a_cell_indented_as_a_whole_runs_dedented_as_ipython_does(tmp_path, capsys):
    nb = tmp_path / "vit.ipynb"
    nb.write_text(notebook("import torch\n", " # parameters\n scaler = torch.cuda.amp.GradScaler()\n scaler"))
    code, out = run(capsys, str(nb))
    assert "TD000" not in out
    # Located in the cell as written: column 11, one more than the dedented line's.
    assert f"{nb}:cell 2:2:11: TD304" in out and code == 1


def test_fixing_an_indented_cell_keeps_its_indentation(tmp_path, capsys):
    nb = tmp_path / "vit.ipynb"
    nb.write_text(notebook("import torch\n", "  scaler = torch.cuda.amp.GradScaler()\n  scaler"))
    code, out = run(capsys, "--fix", str(nb))
    cells = json.loads(nb.read_text())["cells"]
    assert "".join(cells[1]["source"]) == '  scaler = torch.amp.GradScaler("cuda")\n  scaler', out
    assert read_notebook(nb.read_bytes()).source.startswith("import torch\n")


def test_an_indented_line_that_is_a_real_error_is_still_td000(tmp_path, capsys):
    nb = tmp_path / "bad.ipynb"
    nb.write_text(notebook("import torch\n", "x = 1\n  y = 2\n"))
    code, out = run(capsys, str(nb))
    assert f"{nb}:cell 2:2" in out and "TD000" in out


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
    assert findings(tmp_path, files, "train.py", ["TD102"]) == []
    # The same helper returning a dataset that reads files: its loader is reported.
    files["train.py"] = RETURNED.format(cls="ImageFiles")
    assert findings(tmp_path, files, "train.py", ["TD102"]) == [("TD102", 18)]


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
    assert findings(tmp_path, {"train.py": source}, "train.py", ["TD102"]) == []
    source = LIGHTNING_DEMO.format(dataset='ImageFolder("data/train")')
    assert findings(tmp_path, {"train.py": source}, "train.py", ["TD102"]) == [("TD102", 13)]
