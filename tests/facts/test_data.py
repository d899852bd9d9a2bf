"""Loader facts (facts/data/static.py): evaluation names and test files, loaders that only evaluate,
loaders repeated by an epoch loop, loaders only peeked at with ``next(iter(...))``, keyword dicts
passed as ``**kwargs``, and the data rules on a whole tutorial script.
"""

from __future__ import annotations

import ast
import textwrap

import pytest
from helpers.project_tree import checked_rows
from helpers.snippets import data_check, data_rows

from traindoctor.check.engine import file_context
from traindoctor.config import Settings
from traindoctor.facts.data.static import is_evaluation_name, is_test_file, loader_index
from traindoctor.static.context import FileContext


def _ctx(src: str, filename: str = "train.py") -> FileContext:
    src = textwrap.dedent(src)
    return file_context(filename, src, ast.parse(src), Settings(min_torch_version="2.13"))


@pytest.mark.parametrize(
    "name",
    [
        "val_loader",
        "valloader",
        "testloader",
        "eval_dl",
        "validation_data",
        "test_dataloader",
        "valLoader",
        "dev_set",
        "evaluate",
        "predict_dataloader",
    ],
)
def test_evaluation_names(name):
    assert is_evaluation_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "train_loader",
        "interval_loader",
        "latest_loader",
        "loader",
        "contest",
        "trainval_loader",
        "evaluator_cfg",
        "value",
    ],
)
def test_training_names(name):
    assert not is_evaluation_name(name)


def test_test_files():
    assert is_test_file("tests/test_train.py") and is_test_file("pkg/tests/helpers.py")
    assert is_test_file("foo_test.py") and not is_test_file("train.py")
    assert not is_test_file("test/train.py")  # a user's scratch folder called "test"


def _loader(src: str, line: int):
    ctx = _ctx(src)
    index = loader_index(ctx)
    found = [l for l in index.loaders if l.call.lineno == line]
    assert len(found) == 1, [l.call.lineno for l in index.loaders]
    return found[0]


def test_evaluation_loader_by_no_grad_and_by_dataset():
    src = """
    import torch
    from torch.utils.data import DataLoader
    from torchvision.datasets import CIFAR10
    a = DataLoader(ds, batch_size=4)
    b = DataLoader(CIFAR10("data", train=False), batch_size=4)
    c = DataLoader(ds2, batch_size=4)
    with torch.no_grad():
        for x in a:
            model(x)
    for x in c:
        model(x).sum().backward()
    """
    assert _loader(src, 5).evaluation_only
    assert _loader(src, 6).evaluation_only
    assert not _loader(src, 7).evaluation_only


def test_evaluation_function_and_decorator():
    src = """
    import torch
    from torch.utils.data import DataLoader

    def make_val_loader(ds):
        return DataLoader(ds)

    @torch.inference_mode()
    def score(loader):
        for x in loader:
            model(x)

    def build(ds):
        return DataLoader(ds)

    score(build(ds))
    """
    assert _loader(src, 6).evaluation_only
    assert _loader(src, 14).evaluation_only


def test_shared_factory_used_for_train_and_val_is_training():
    src = """
    from torch.utils.data import DataLoader

    def get_loader(split):
        return DataLoader(make(split), batch_size=8)

    train_loader = get_loader("train")
    val_loader = get_loader("val")
    """
    loader = _loader(src, 5)
    assert not loader.evaluation_only
    assert loader.names == ["get_loader", "train_loader", "val_loader"]


def test_repeated_through_method_called_in_loop():
    src = """
    from torch.utils.data import DataLoader

    class Trainer:
        def __init__(self):
            self.train_loader = DataLoader(ds, num_workers=4)

        def one_epoch(self):
            for batch in self.train_loader:
                pass

        def fit(self):
            for epoch in range(3):
                self.one_epoch()
    """
    site = _loader(src, 6).repeated_site
    assert site is not None and site.repeated_by.lineno == 13


def test_endless_iterator_once_and_reset_iterator_repeated():
    once = """
    from torch.utils.data import DataLoader
    loader = DataLoader(ds, num_workers=4)
    it = iter(loader)
    for step in range(1000):
        batch = next(it)
    """
    assert _loader(once, 3).repeated_site is None
    reset = """
    from torch.utils.data import DataLoader
    loader = DataLoader(ds, num_workers=4)
    it = iter(loader)
    for step in range(1000):
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
    """
    site = _loader(reset, 3).repeated_site
    assert site is not None and site.kind == "iter" and site.node.lineno == 9


def test_rebuilt_each_epoch_and_range_one_are_not_repeated():
    src = """
    from torch.utils.data import DataLoader

    def make():
        return DataLoader(ds, num_workers=4)

    for epoch in range(10):
        loader = make()
        for x in loader:
            pass
    once = DataLoader(ds, num_workers=4)
    for epoch in range(1):
        for x in once:
            pass
    """
    assert _loader(src, 5).repeated_site is None
    assert _loader(src, 11).repeated_site is None


def test_tuple_return_and_prepare_continuation():
    src = """
    from torch.utils.data import DataLoader

    def build():
        train = DataLoader(ds, num_workers=2)
        val = DataLoader(vds, num_workers=2)
        return train, val

    train_dl, eval_dl = build()
    model, opt, train_dl = accelerator.prepare(model, opt, train_dl)
    for epoch in range(5):
        for batch in train_dl:
            accelerator.backward(model(batch))
    """
    train = _loader(src, 5)
    assert not train.evaluation_only and train.repeated_site is not None
    assert _loader(src, 6).evaluation_only


def test_name_reused_for_train_and_val():
    src = """
    from torch.utils.data import DataLoader
    loader = DataLoader(train_ds, num_workers=2)
    for epoch in range(5):
        for x in loader:
            model(x).sum().backward()
    loader = DataLoader(other, num_workers=2)
    for x in loader:
        pass
    """
    assert _loader(src, 3).repeated_site is not None
    assert _loader(src, 7).repeated_site is None


def test_lightning_train_dataloader_hook_repeats():
    src = """
    import lightning as L
    from torch.utils.data import DataLoader

    class Model(L.LightningModule):
        def train_dataloader(self):
            return DataLoader(self.ds, num_workers=4)

        def val_dataloader(self):
            return DataLoader(self.vds, num_workers=4)
    """
    assert _loader(src, 7).repeated_site.kind == "hook"
    assert _loader(src, 10).evaluation_only


CIFAR_TUTORIAL = """
import torch
import torchvision
import torchvision.transforms as transforms

transform = transforms.Compose([transforms.ToTensor()])
trainset = torchvision.datasets.CIFAR10(root="./data", train=True, download=True, transform=transform)
trainloader = torch.utils.data.DataLoader(trainset, batch_size=4, shuffle=True, num_workers=2)
testset = torchvision.datasets.CIFAR10(root="./data", train=False, download=True, transform=transform)
testloader = torch.utils.data.DataLoader(testset, batch_size=4, shuffle=False, num_workers=2)
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
net = Net().to(device)
optimizer = torch.optim.SGD(net.parameters(), lr=0.001, momentum=0.9)
for epoch in range(2):
    for i, data in enumerate(trainloader, 0):
        inputs, labels = data[0].to(device), data[1].to(device)
        optimizer.zero_grad()
        loss = criterion(net(inputs), labels)
        loss.backward()
        optimizer.step()
with torch.no_grad():
    for data in testloader:
        outputs = net(data[0].to(device))
"""


def test_cifar_tutorial_findings():
    result = data_check(CIFAR_TUTORIAL)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD101", 8), ("TD103", 8)]
    td103 = result.findings[1]
    assert "line 14" in td103.message and "2 worker" in td103.message
    fixed = data_check(CIFAR_TUTORIAL, fix=True).fixed_source
    assert "num_workers=2, pin_memory=True, persistent_workers=True)" in fixed
    assert "testset, batch_size=4, shuffle=False, num_workers=2)" in fixed


def test_same_script_on_cpu_reports_only_device_independent_rules():
    cpu = CIFAR_TUTORIAL.replace('"cuda:0" if torch.cuda.is_available() else "cpu"', '"cpu"')
    assert data_rows(cpu) == [("TD103", 8)]


def test_test_files_get_no_performance_findings():
    assert data_rows(CIFAR_TUTORIAL, filename="tests/test_train.py") == []


def test_kwargs_dict_updated_in_place_is_opaque():
    # pytorch/examples shape: worker/pinning keys arrive through ``.update()`` under ``if use_cuda``.
    src = """
    import torch
    from torch.utils.data import DataLoader
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda" if use_cuda else "cpu")
    train_kwargs = {"batch_size": 64}
    if use_cuda:
        train_kwargs.update({"num_workers": 1, "pin_memory": True, "shuffle": True})
    train_loader = DataLoader(train_set, **train_kwargs)
    model = Net().to(device)
    for epoch in range(10):
        for x, y in train_loader:
            loss = model(x.to(device)).sum()
            loss.backward()
    """
    assert data_rows(src, ["TD101", "TD102"]) == []


def test_kwargs_dict_with_item_assignment_is_read():
    # every change to ``kw`` is spelled out: it holds batch_size and num_workers, no pin_memory
    src = """
    import torch
    from torch.utils.data import DataLoader
    kw = {"batch_size": 64}
    kw["num_workers"] = 8
    loader = DataLoader(train_set, **kw)
    for epoch in range(10):
        for x in loader:
            model(x.cuda()).sum().backward()
    """
    assert data_rows(src, ["TD101", "TD102", "TD103"]) == [("TD101", 6), ("TD103", 6)]


def test_kwargs_dict_changed_opaquely_or_elsewhere_stays_opaque():
    for change in ("kw.update(extra)", 'kw.pop("num_workers")', "kw |= extra", "kw[key] = 8"):
        # pop("num_workers") changes that entry only: pin_memory is still unset (TD101 stands)
        codes = ["TD102"] if "pop" in change else ["TD101", "TD102"]
        src = f"""
        import torch
        from torch.utils.data import DataLoader
        kw = {{"batch_size": 64, "num_workers": 0}}
        {change}
        loader = DataLoader(train_set, **kw)
        for epoch in range(10):
            for x in loader:
                model(x.cuda()).sum().backward()
        """
        assert data_rows(src, codes) == [], change
    # an entry popped is unknown; the other entries keep their values (num_workers=0 is still read)
    src = """
    import torch
    from torch.utils.data import DataLoader
    kw = {"batch_size": 64, "num_workers": 0, "pin_memory": False}
    kw.pop("pin_memory", None)
    loader = DataLoader(train_set, **kw)
    for epoch in range(10):
        for x in loader:
            model(x.cuda()).sum().backward()
    """
    assert data_rows(src, ["TD101", "TD102"]) == [("TD102", 6)]
    # the same name changed in another function: not this dict's change
    src = """
    import torch
    from torch.utils.data import DataLoader

    def other():
        kw = {}
        kw["num_workers"] = 0

    kw = {"batch_size": 64, "num_workers": 4}
    loader = DataLoader(train_set, **kw)
    for epoch in range(10):
        for x in loader:
            model(x.cuda()).sum().backward()
    """
    assert data_rows(src, ["TD102"]) == []


def test_unmutated_kwargs_dict_is_still_read():
    src = """
    import torch
    from torch.utils.data import DataLoader
    kw = {"batch_size": 64}
    loader = DataLoader(train_set, **kw)
    for epoch in range(10):
        for x in loader:
            model(x.cuda()).sum().backward()
    """
    assert data_rows(src, ["TD101", "TD102"]) == [("TD101", 5), ("TD102", 5)]


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
    got = checked_rows(tmp_path, {"train.py": PEEK}, "train.py", ["TD101", "TD102", "TD206"])
    # The peeked loader (row 13) gets nothing; the loader that trains (row 22) is still reported.
    assert got == [("TD102", 22)]


def test_next_iter_repeated_by_a_loop_is_still_training(tmp_path):
    source = PEEK.replace(
        "        for imgs, labels in train_loader_local:\n",
        "        for step in range(100):\n            imgs, labels = next(iter(train_loader_local))\n",
    )
    got = checked_rows(tmp_path, {"train.py": source}, "train.py", ["TD102"])
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
    got = checked_rows(tmp_path, {"train.py": source}, "train.py", ["TD102"])
    assert ("TD102", 22) in got


CUDA_ITEMS = """
import torch
from torch.utils.data import DataLoader, Dataset


class TextSamplerDataset(Dataset):
    def __init__(self, data, seq_len):
        self.data, self.seq_len = data, seq_len

    def __getitem__(self, index):
        start = torch.randint(0, self.data.size(0) - self.seq_len, (1,))
        return {ret}

    def __len__(self):
        return self.data.size(0) // self.seq_len


loader = DataLoader(TextSamplerDataset(data, 1024), batch_size=4)
for step in range(10000):
    for x in loader:
        model(x.cuda()).sum().backward()
"""


@pytest.mark.parametrize(
    "ret",
    [
        "self.data[start : start + self.seq_len].long().cuda()",
        "self.data[start : start + self.seq_len].to(self.device)",
    ],
)
def test_a_dataset_whose_items_are_on_cuda_gets_no_pinning_or_worker_advice(ret):
    # PaLM-pytorch's enwik8 sampler: batches come out of __getitem__ on the GPU already
    assert data_rows(CUDA_ITEMS.format(ret=ret), ["TD101", "TD102"]) == []
    on_host = CUDA_ITEMS.format(ret="self.data[start : start + self.seq_len].long()")
    assert data_rows(on_host, ["TD101", "TD102"]) == [("TD101", 18), ("TD102", 18)]
