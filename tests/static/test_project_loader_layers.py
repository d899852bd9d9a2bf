"""Loaders and samplers built through layers of project helpers, and passes that do not train.

* a factory that returns another function's loader (``construct_train_loader()`` ->
  ``_construct_loader(...)``, in the same module or another one), with a branch that returns
  something else;
* loaders appended to a list the helper returns (``loaders[0]`` at the caller);
* a ``DistributedSampler`` returned by a helper of a helper (``create_sampler(ds, cfg)``), and a
  ``shuffle_dataset`` helper that sets the epoch of the loader's sampler or only of an object
  its dataset owns;
* reads that neither iterate nor hand on the loader (``len(loader)``, a helper that only reads
  ``loader.sampler``), and loops that never read their batches (a loader benchmark).
"""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, rows

LOADER_MODULE = """
import torch
from torch.utils.data.distributed import DistributedSampler


def _construct_loader(dataset, batch_size, shuffle, workers=4):
    sampler = DistributedSampler(dataset) if torch.distributed.is_initialized() else None
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=(False if sampler else shuffle),
        sampler=sampler,
        num_workers={workers},
        pin_memory=True,
    )
    return loader


def _construct_fast_loader(dataset, batch_size):
    return FastLoader(dataset, batch_size)


def construct_train_loader(cfg, dataset):
    if cfg.FAST:
        return _construct_fast_loader(dataset, 64)
    return _construct_loader(dataset, 64, shuffle=True)


def construct_test_loader(cfg, dataset):
    return _construct_loader(dataset, 64, shuffle=False)


def shuffle(loader, epoch):
    loader.sampler.set_epoch(epoch)
"""

TRAINER = """
import torch
from data import loader as data_loader


def train_epoch(loader, model, optimizer, epoch):
    data_loader.shuffle(loader, epoch)
    for x, y in loader:
        loss = model(x.cuda()).sum()
        loss.backward()
        optimizer.step()


def train_model(cfg, model, train_set, test_set):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = data_loader.construct_train_loader(cfg, train_set)
    test_loader = data_loader.construct_test_loader(cfg, test_set)
    print(len(train_loader), len(test_loader))
    for epoch in range(cfg.EPOCHS):
        train_epoch(train_loader, model, optimizer, epoch)
        with torch.no_grad():
            for x, y in test_loader:
                model(x.cuda())
"""


def _wrapper_files(workers: str, trainer: str = TRAINER) -> dict[str, str]:
    return {"data/__init__.py": "", "data/loader.py": LOADER_MODULE.replace("{workers}", workers), "train.py": trainer}


def test_a_wrapper_returning_another_functions_loader_is_a_factory(tmp_path: Path) -> None:
    result = check(tmp_path, _wrapper_files("0"), "train.py", ["TD101", "TD102", "TD103"])
    assert rows(result) == [("TD102", 15)]  # the test loader (same construction) stays silent
    (finding,) = result.findings
    assert "`num_workers` is 0" in finding.message
    (related,) = finding.related
    assert Path(related.filename).name == "loader.py" and related.location.row == 7
    assert "construct_train_loader" in related.message


def test_a_wrapper_passes_its_own_values_for_the_helpers_parameters(tmp_path: Path) -> None:
    # ``workers`` defaults to 4 in ``_construct_loader``: 4 workers restarted every epoch
    result = check(tmp_path, _wrapper_files("workers"), "train.py", ["TD101", "TD102", "TD103"])
    assert rows(result) == [("TD103", 15)]
    assert "4 worker processes" in result.findings[0].message
    passed = LOADER_MODULE.replace("{workers}", "workers").replace(
        "return _construct_loader(dataset, 64, shuffle=True)", "return _construct_loader(dataset, 64, True, workers=0)"
    )
    files = {"data/__init__.py": "", "data/loader.py": passed, "train.py": TRAINER}
    assert rows(check(tmp_path, files, "train.py", ["TD102"])) == [("TD102", 15)]


def test_the_sampler_of_a_wrapped_factory_and_a_shuffle_helper(tmp_path: Path) -> None:
    files = _wrapper_files("4")
    assert rows(check(tmp_path, files, "train.py", ["TD601"])) == []  # shuffle() sets the epoch
    files["data/loader.py"] = files["data/loader.py"].replace("loader.sampler.set_epoch(epoch)", "pass")
    result = check(tmp_path, files, "train.py", ["TD601"])
    assert rows(result) == [("TD601", 15)]
    (finding,) = result.findings
    assert "from `construct_train_loader`" in finding.message and "loop at line 18" in finding.message
    (related,) = finding.related
    assert Path(related.filename).name == "loader.py" and related.location.row == 6


def test_a_shuffle_helper_that_sets_only_a_dataset_objects_epoch_does_not_count(tmp_path: Path) -> None:
    files = _wrapper_files("4")
    files["data/loader.py"] = files["data/loader.py"].replace(
        "    loader.sampler.set_epoch(epoch)",
        "    sampler = loader.sampler\n"
        "    if hasattr(loader.dataset, 'prefetcher'):\n"
        "        sampler = loader.dataset.prefetcher.sampler\n"
        "        sampler.set_epoch(epoch)\n"
        "    loader.dataset.set_epoch(epoch)",
    )
    assert rows(check(tmp_path, files, "train.py", ["TD601"])) == [("TD601", 15)]
    # the loader's own sampler, bound before the branch: it counts
    files["data/loader.py"] = files["data/loader.py"].replace(
        "    loader.dataset.set_epoch(epoch)", "    sampler.set_epoch(epoch)"
    )
    assert rows(check(tmp_path, files, "train.py", ["TD601"])) == []


SAMPLER_UTILS = """
from torch.utils.data.distributed import DistributedSampler


def create_sampler(dataset, shuffle, cfg):
    sampler = DistributedSampler(dataset) if cfg.NUM_GPUS > 1 else None
    return sampler
"""

LOCAL_LOADER_SCRIPT = """
import torch
from data.utils import create_sampler


def main(cfg, model, dataset):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    sampler = create_sampler(dataset, True, cfg)
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler, num_workers=4,
                                         pin_memory=True, persistent_workers=True)
    for epoch in range(cfg.EPOCHS):
        for x, y in loader:
            model(x.cuda()).sum().backward()
            optimizer.step()
"""


def test_a_loader_built_here_from_a_helpers_distributed_sampler(tmp_path: Path) -> None:
    files = {"data/__init__.py": "", "data/utils.py": SAMPLER_UTILS, "train.py": LOCAL_LOADER_SCRIPT}
    result = check(tmp_path, files, "train.py", ["TD601"])
    assert rows(result) == [("TD601", 8)]
    (finding,) = result.findings
    assert "draws from a DistributedSampler" in finding.message and "loop at line 10" in finding.message
    (related,) = finding.related
    assert Path(related.filename).name == "utils.py" and related.location.row == 5
    sets = LOCAL_LOADER_SCRIPT.replace(
        "        for x, y in loader:", "        sampler.set_epoch(epoch)\n        for x, y in loader:"
    )
    files["train.py"] = sets
    assert rows(check(tmp_path, files, "train.py", ["TD601"])) == []
    # a sampler that does not shuffle replays nothing
    files = {
        "data/__init__.py": "",
        "data/utils.py": SAMPLER_UTILS.replace(
            "DistributedSampler(dataset)", "DistributedSampler(dataset, shuffle=False)"
        ),
        "train.py": LOCAL_LOADER_SCRIPT,
    }
    assert rows(check(tmp_path, files, "train.py", ["TD601"])) == []


def test_the_datasets_own_epoch_is_not_the_samplers(tmp_path: Path) -> None:
    script = """
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    def main(model, dataset, optimizer):
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        for epoch in range(10):
            loader.dataset.set_epoch(epoch)
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
    """
    assert rows(check(tmp_path, {"train.py": script}, "train.py", ["TD601"])) == [("TD601", 5)]
    fixed = script.replace("loader.dataset.set_epoch(epoch)", "loader.sampler.set_epoch(epoch)")
    assert rows(check(tmp_path, {"train.py": fixed}, "train.py", ["TD601"])) == []


def test_an_unrelated_string_naming_set_epoch_does_not_silence(tmp_path: Path) -> None:
    script = """
    import torch
    from torch.utils.data import DataLoader, DistributedSampler

    def main(model, dataset, optimizer):
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        for epoch in range(10):
            if hasattr(loader.dataset, "_set_epoch_num"):
                loader.dataset._set_epoch_num(epoch)
            for x, y in loader:
                model(x).sum().backward()
                optimizer.step()
    """
    assert rows(check(tmp_path, {"train.py": script}, "train.py", ["TD601"])) == [("TD601", 5)]
    indirect = script.replace('"_set_epoch_num"', '"set_epoch"').replace("_set_epoch_num(epoch)", "set_epoch(epoch)")
    assert rows(check(tmp_path, {"train.py": indirect}, "train.py", ["TD601"])) == []


LIST_HELPER = """
from torch.utils.data import DataLoader


def get_data_loaders(dataset, batch_size=64, num_workers=8, use_multiepoch_sampler=False):
    loaders = []
    if use_multiepoch_sampler:
        loader_kwargs = {"num_workers": 0, "pin_memory": True}
        train_loader = DataLoader(dataset, batch_size=batch_size, sampler=make_sampler(dataset), **loader_kwargs)
    else:
        loader_kwargs = {"num_workers": num_workers, "pin_memory": True}
        train_loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, **loader_kwargs)
    loaders.append(train_loader)
    return loaders
"""

LIST_SCRIPT = """
import torch
import utils


def run(config, model, dataset, optimizer):
    loaders = utils.get_data_loaders(dataset, batch_size=config.batch_size)
    for epoch in range(config.epochs):
        for x, y in loaders[0]:
            model(x.cuda()).sum().backward()
            optimizer.step()
"""


def test_a_loader_appended_to_a_returned_list_is_read_by_its_index(tmp_path: Path) -> None:
    files = {"utils.py": LIST_HELPER, "train.py": LIST_SCRIPT}
    result = check(tmp_path, files, "train.py", ["TD101", "TD102", "TD103"])
    # the multi-epoch branch passes 0 workers through its kwargs dict; the other one 8 (default)
    assert rows(result) == [("TD102", 6), ("TD103", 6)]
    td102 = result.findings[0]
    assert "`num_workers` is 0" in td102.message
    assert [(Path(r.filename).name, r.location.row) for r in td102.related] == [("utils.py", 8)]
    assert "8 worker processes" in result.findings[1].message


def test_a_list_appended_in_a_loop_is_not_followed(tmp_path: Path) -> None:
    helper = LIST_HELPER.replace(
        "    loaders.append(train_loader)", "    for _ in range(2):\n        loaders.append(train_loader)"
    )
    assert rows(check(tmp_path, {"utils.py": helper, "train.py": LIST_SCRIPT}, "train.py", ["TD102", "TD103"])) == []


FEATURES_SCRIPT = """
import torch


def inference(loader, encoder):
    feats = []
    for step, (x, y) in enumerate(loader):
        with torch.no_grad():
            feats.append(encoder(x.cuda()))
        if step % 20 == 0:
            print(f"Step [{step}/{len(loader)}] computing features")
    return feats


def main(encoder, head, train_set, optimizer):
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=256, shuffle=True, num_workers=4)
    features = inference(train_loader, encoder)
    for epoch in range(100):
        for f in features:
            head(f).sum().backward()
            optimizer.step()
"""


def test_len_of_a_feature_extraction_loader_does_not_make_it_a_training_loader(tmp_path: Path) -> None:
    assert rows(check(tmp_path, {"train.py": FEATURES_SCRIPT}, "train.py", ["TD101", "TD102"])) == []
    training = FEATURES_SCRIPT.replace("def inference(", "def fit(").replace(
        "inference(train_loader", "fit(train_loader"
    )
    training = training.replace(
        "        with torch.no_grad():\n            feats.append(encoder(x.cuda()))",
        "        encoder(x.cuda()).sum().backward()",
    )
    result = check(tmp_path, {"train.py": training}, "train.py", ["TD101", "TD102"])
    assert rows(result) == [("TD101", 14)]
    assert "pin_memory=True" in result.findings[0].message


BENCHMARK_HELPERS = """
def shuffle_dataset(loader, epoch):
    if loader.sampler is not None and hasattr(loader.sampler, "set_epoch"):
        loader.sampler.set_epoch(epoch)


def construct_loader(cfg, split):
    import torch
    return torch.utils.data.DataLoader(build(cfg, split), batch_size=8, shuffle=True, num_workers=8)
"""

BENCHMARK = """
import time
from datasets import loader


def benchmark_data_loading(cfg):
    dataloader = loader.construct_loader(cfg, "train")
    times = []
    for cur_epoch in range(cfg.EPOCHS):
        loader.shuffle_dataset(dataloader, cur_epoch)
        start = time.time()
        for cur_iter, _ in enumerate(dataloader):
            if cur_iter % 10 == 0:
                times.append(time.time() - start)
    print(len(dataloader), times)
"""


def test_a_loop_that_never_reads_its_batches_is_not_a_training_pass(tmp_path: Path) -> None:
    files = {"datasets/__init__.py": "", "datasets/loader.py": BENCHMARK_HELPERS, "benchmark.py": BENCHMARK}
    assert rows(check(tmp_path, files, "benchmark.py", ["TD101", "TD102", "TD103"])) == []
    files["benchmark.py"] = BENCHMARK.replace("for cur_iter, _ in", "for cur_iter, batch in").replace(
        "            if cur_iter % 10 == 0:",
        "            model(batch).sum().backward()\n            if cur_iter % 10 == 0:",
    )
    result = check(tmp_path, files, "benchmark.py", ["TD103"])
    assert rows(result) == [("TD103", 6)]
    assert "8 worker processes" in result.findings[0].message


EMBEDDINGS_SCRIPT = """
import torch
from data import init_data


def make_embeddings(data_loader, encoder, epochs=1):
    z_mem = []
    for _ in range(epochs):
        for itr, (imgs, labels) in enumerate(data_loader):
            with torch.no_grad():
                z_mem.append(encoder(imgs.cuda()))
    return torch.cat(z_mem)


def main(encoder, head):
    data_loader, _ = init_data(batch_size=16, num_workers=0)
    embs = make_embeddings(data_loader, encoder)
    optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
    for epoch in range(10):
        head(embs).sum().backward()
        optimizer.step()
"""

INIT_DATA = """
import torch


def init_data(batch_size, num_workers=8):
    dataset = ImageNet()
    sampler = torch.utils.data.distributed.DistributedSampler(dataset)
    loader = torch.utils.data.DataLoader(dataset, sampler=sampler, batch_size=batch_size, num_workers=num_workers)
    return (loader, sampler)
"""


def test_a_loop_that_runs_its_model_under_no_grad_extracts_features(tmp_path: Path) -> None:
    files = {"data.py": INIT_DATA, "embed.py": EMBEDDINGS_SCRIPT}
    assert rows(check(tmp_path, files, "embed.py", ["TD101", "TD102", "TD103", "TD601"])) == []
    # the same loop with an optimizer step in it trains
    files["embed.py"] = EMBEDDINGS_SCRIPT.replace(
        "                z_mem.append(encoder(imgs.cuda()))",
        "                z_mem.append(encoder(imgs.cuda()))\n            head(z_mem[-1]).sum().backward()\n"
        "            optimizer.step()",
    ).replace(
        "def make_embeddings(data_loader, encoder, epochs=1):",
        "def make_embeddings(data_loader, encoder, epochs=1, head=None, optimizer=None):",
    )
    result = check(tmp_path, files, "embed.py", ["TD102"])
    assert rows(result) == [("TD102", 17)]


DICT_BUILDER = """
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler


def build(dataset, val_set, workers=0):
    sampler = DistributedSampler(dataset)
    batch_sampler = BatchSampler(sampler, 32, drop_last=True)
    loader = DataLoader(dataset, batch_sampler=batch_sampler, num_workers=workers, pin_memory=True)
    val_loader = DataLoader(val_set, batch_size=64, num_workers=0)
    return {"train": loader, "val": val_loader, "sampler": sampler}
"""

DICT_SCRIPT = """
import torch
from builder import build


def main(dataset, val_set, model, optimizer, epochs):
    data = build(dataset, val_set)
    for epoch in range(epochs):
        for x, y in data["train"]:
            model(x.cuda()).sum().backward()
            optimizer.step()
        with torch.no_grad():
            for x, y in data["val"]:
                model(x.cuda())
"""


def test_loaders_returned_in_a_dict_are_read_by_their_keys(tmp_path: Path) -> None:
    files = {"builder.py": DICT_BUILDER, "train.py": DICT_SCRIPT}
    result = check(tmp_path, files, "train.py", ["TD102", "TD601"])
    assert rows(result) == [("TD102", 6), ("TD601", 6)]  # the "val" loader's 0 workers stay silent
    td102, td601 = result.findings
    assert [(Path(r.filename).name, r.location.row) for r in td102.related] == [("builder.py", 7)]
    assert "from `build`" in td601.message and "loop at line 7" in td601.message
    assert [(Path(r.filename).name, r.location.row) for r in td601.related] == [("builder.py", 5)]
    sets = DICT_SCRIPT.replace(
        "    for epoch in range(epochs):\n",
        '    for epoch in range(epochs):\n        data["sampler"].set_epoch(epoch)\n',
    )
    files["train.py"] = sets
    assert rows(check(tmp_path, files, "train.py", ["TD601"])) == []


def test_a_dict_read_with_a_variable_key_is_not_followed(tmp_path: Path) -> None:
    script = DICT_SCRIPT.replace('for x, y in data["train"]:', "for x, y in data[phase]:").replace(
        "def main(dataset, val_set, model, optimizer, epochs):",
        "def main(dataset, val_set, model, optimizer, epochs, phase):",
    )
    assert rows(check(tmp_path, {"builder.py": DICT_BUILDER, "train.py": script}, "train.py", ["TD102", "TD601"])) == []


def test_a_dict_of_loaders_in_the_same_file(tmp_path: Path) -> None:
    script = DICT_BUILDER.replace("from torch.utils.data import", "import torch\nfrom torch.utils.data import")
    script = script.replace("num_workers=workers", "num_workers=0") + DICT_SCRIPT.replace(
        "import torch\nfrom builder import build\n", ""
    )
    result = check(tmp_path, {"train.py": script}, "train.py", ["TD102", "TD601"])
    assert rows(result) == [("TD601", 6), ("TD102", 8)]
    assert "loop at line 16" in result.findings[0].message


CONDITIONAL_BUILDER = """
import torch


def build_loader(config):
    dataset_train, dataset_val = build_dataset(config)
    sampler_train = torch.utils.data.DistributedSampler(dataset_train, shuffle=True)
    data_loader_train = torch.utils.data.DataLoader(
        dataset_train, sampler=sampler_train, batch_size=config.BATCH_SIZE, num_workers=0,
        pin_memory=True) if dataset_train is not None else None
    data_loader_val = torch.utils.data.DataLoader(
        dataset_val, batch_size=config.BATCH_SIZE, num_workers=0) if dataset_val is not None else None
    return dataset_train, dataset_val, data_loader_train, data_loader_val
"""

CONDITIONAL_SCRIPT = """
import torch
from data.build import build_loader


def main(config, model, optimizer):
    dataset_train, dataset_val, data_loader_train, data_loader_val = build_loader(config)
    for epoch in range(config.EPOCHS):
        data_loader_train.sampler.set_epoch(epoch)
        for x, y in data_loader_train:
            model(x.cuda()).sum().backward()
            optimizer.step()
"""


def test_a_loader_built_in_a_conditional_expression_with_none(tmp_path: Path) -> None:
    files = {"data/__init__.py": "", "data/build.py": CONDITIONAL_BUILDER, "train.py": CONDITIONAL_SCRIPT}
    result = check(tmp_path, files, "train.py", ["TD102", "TD601"])
    assert rows(result) == [("TD102", 6)]  # the epoch is set; the val loader is never iterated for training
    assert [(Path(r.filename).name, r.location.row) for r in result.findings[0].related] == [("build.py", 7)]
    files["train.py"] = CONDITIONAL_SCRIPT.replace("        data_loader_train.sampler.set_epoch(epoch)\n", "")
    result = check(tmp_path, files, "train.py", ["TD601"])
    assert rows(result) == [("TD601", 6)]
    assert [(Path(r.filename).name, r.location.row) for r in result.findings[0].related] == [("build.py", 6)]
    # another branch that builds something else: not a plain factory
    files["data/build.py"] = CONDITIONAL_BUILDER.replace(
        "pin_memory=True) if dataset_train is not None else None",
        "pin_memory=True) if dataset_train is not None else Dali()",
    )
    assert rows(check(tmp_path, files, "train.py", ["TD102", "TD601"])) == []
