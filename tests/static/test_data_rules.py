"""Loader classification (facts/data/static.py) and the data-loading rules TD101-TD103, TD201, TD601."""

from __future__ import annotations

import ast
import textwrap

import pytest

from traindoctor.check.engine import check_source, file_context, instantiate
from traindoctor.config import Settings
from traindoctor.facts.data.static import is_evaluation_name, is_test_file, loader_index
from traindoctor.static.context import FileContext

CODES = ["TD101", "TD102", "TD103", "TD201", "TD601"]


def _ctx(src: str, filename: str = "train.py") -> FileContext:
    src = textwrap.dedent(src)
    return file_context(filename, src, ast.parse(src), Settings(min_torch_version="2.13"))


def _findings(src: str, codes=CODES, filename: str = "train.py", **kw):
    result = check_source(textwrap.dedent(src), filename, Settings(min_torch_version="2.13"), instantiate(codes), **kw)
    assert not result.internal_errors
    return result


def _rows(src: str, codes=CODES, filename: str = "train.py") -> list[tuple[str, int]]:
    return [(f.code, f.location.row) for f in _findings(src, codes, filename).findings]


# ------------------------------------------------------------------------------ names


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


# ------------------------------------------------------------------------------ classification


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


# ------------------------------------------------------------------------------ rules on scripts

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
    result = _findings(CIFAR_TUTORIAL)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD101", 8), ("TD103", 8)]
    td103 = result.findings[1]
    assert "line 14" in td103.message and "2 worker" in td103.message
    fixed = _findings(CIFAR_TUTORIAL, fix=True).fixed_source
    assert "num_workers=2, pin_memory=True, persistent_workers=True)" in fixed
    assert "testset, batch_size=4, shuffle=False, num_workers=2)" in fixed


def test_same_script_on_cpu_reports_only_device_independent_rules():
    cpu = CIFAR_TUTORIAL.replace('"cuda:0" if torch.cuda.is_available() else "cpu"', '"cpu"')
    assert _rows(cpu) == [("TD103", 8)]


def test_test_files_get_no_performance_findings():
    assert _rows(CIFAR_TUTORIAL, filename="tests/test_train.py") == []


def test_td101_fix_replaces_keyword_false():
    src = """
    import torch
    loader = torch.utils.data.DataLoader(ds, batch_size=64, pin_memory=False, num_workers=4)
    for x in loader:
        model(x.cuda()).sum().backward()
    """
    result = _findings(src, ["TD101"], fix=True)
    assert "pin_memory=True, num_workers=4)" in result.fixed_source
    assert result.findings == []


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
    a, b = _findings(src, ["TD102"]).findings
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
    assert _rows(src, ["TD102"]) == [("TD102", 16)]


def test_td103_fix_is_unsafe_when_loop_changes_dataset():
    src = """
    from torch.utils.data import DataLoader
    loader = DataLoader(train_ds, batch_size=64, num_workers=4)
    for epoch in range(10):
        train_ds.set_epoch(epoch)
        for x in loader:
            model(x).sum().backward()
    """
    (finding,) = _findings(src, ["TD103"]).findings
    assert finding.fix is not None and finding.fix.applicability == "unsafe"
    assert _findings(src, ["TD103"], fix=True).fixed_source is None
    unsafe = _findings(src, ["TD103"], fix=True, unsafe_fixes=True).fixed_source
    assert "num_workers=4, persistent_workers=True)" in unsafe


def test_td201_message_and_threshold():
    src = """
    import torch
    from torch.utils.data import DataLoader
    a = DataLoader(ds, batch_size=100)
    b = DataLoader(ds, batch_size=4)
    c = DataLoader(ds, batch_size=64)
    model.cuda()
    loss.backward()
    """
    (finding,) = _findings(src, ["TD201"]).findings
    assert finding.location.row == 4
    assert "Batch size 100" in finding.message and "96 or 104" in finding.message


IMAGENET_DDP = """
import torch
import torch.utils.data
import torch.utils.data.distributed

def train(train_loader, model, optimizer):
    for i, (images, target) in enumerate(train_loader):
        loss = model(images.cuda()).sum()
        loss.backward()

def main_worker(args):
    if args.distributed:
        train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset)
        val_sampler = torch.utils.data.distributed.DistributedSampler(val_dataset, shuffle=False)
    else:
        train_sampler = None
        val_sampler = None
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=(train_sampler is None),
        num_workers=args.workers, pin_memory=True, sampler=train_sampler)
    val_loader = torch.utils.data.DataLoader(
        val_dataset, batch_size=args.batch_size, shuffle=False,
        num_workers=args.workers, pin_memory=True, sampler=val_sampler)
    for epoch in range(args.start_epoch, args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)
        train(train_loader, model, optimizer)
"""


def test_td601_imagenet_example_is_clean_and_fires_without_set_epoch():
    assert _rows(IMAGENET_DDP, ["TD601"]) == []
    broken = IMAGENET_DDP.replace("            train_sampler.set_epoch(epoch)\n", "            pass\n")
    (finding,) = _findings(broken, ["TD601"]).findings
    assert finding.location.row == 13  # the train sampler; the val sampler does not shuffle
    assert "loop at line 24" in finding.message


def test_td601_set_epoch_on_another_sampler_does_not_count():
    src = """
    from torch.utils.data import DataLoader, DistributedSampler
    s1 = DistributedSampler(a)
    s2 = DistributedSampler(b)
    l1 = DataLoader(a, sampler=s1)
    l2 = DataLoader(b, sampler=s2)
    for epoch in range(3):
        l1.sampler.set_epoch(epoch)
        for x in l1:
            pass
        for x in l2:
            pass
    """
    assert _rows(src, ["TD601"]) == [("TD601", 4)]


def test_td601_unknown_set_epoch_receiver_silences():
    src = """
    from torch.utils.data import DataLoader, DistributedSampler
    s1 = DistributedSampler(a)
    l1 = DataLoader(a, sampler=s1)
    for epoch in range(3):
        for s in samplers:
            s.set_epoch(epoch)
        for x in l1:
            pass
    """
    assert _rows(src, ["TD601"]) == []


# ------------------------------------------------------------------ precision on real-code shapes


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
    assert _rows(src, ["TD101", "TD102"]) == []


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
    assert _rows(src, ["TD101", "TD102", "TD103"]) == [("TD101", 6), ("TD103", 6)]


def test_kwargs_dict_changed_opaquely_or_elsewhere_stays_opaque():
    for change in ("kw.update(extra)", 'kw.pop("pin_memory")', "kw |= extra", "kw[key] = 8"):
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
        assert _rows(src, ["TD101", "TD102"]) == [], change
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
    assert _rows(src, ["TD102"]) == []


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
    assert _rows(src, ["TD101", "TD102"]) == [("TD101", 5), ("TD102", 5)]


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
    assert _rows(src, ["TD102"]) == []


def test_lambda_factory_over_file_backed_datasets_fires():
    src = LAMBDA_FACTORY.format(first="RandomDataset(4, 16)", second="ImageFolder('/data/train')")
    assert _rows(src, ["TD102"]) == [("TD102", 27)]


def test_lambda_factory_over_unknown_collection_fires():
    src = """
    from torch.utils.data import DataLoader
    def train_dataloader(datasets):
        return list(map(lambda d: DataLoader(d, batch_size=32), datasets))
    def training_step(model, batch):
        return model(batch).sum()
    """
    assert _rows(src, ["TD102"]) == [("TD102", 4)]
