"""Loaders a project helper returns in a tuple, or builds in one of several branches.

``train_loader, test_loader = get_loader(args)`` and ``loader = construct_loader(cfg, "train")``
where the helper binds ``loader`` in each branch: the training loader's keywords come from the
helper's summary, the finding lands at the call in the script and cites the construction.
"""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, rows, write

from traindoctor.check.engine import file_context
from traindoctor.config import Settings
from traindoctor.facts.data.static import LoaderIndex, loader_index
from traindoctor.static.source import parse

TUPLE_HELPER = """
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler


def get_loader(args, workers=4):
    trainset = make_train_set(args)
    testset = make_test_set(args)
    train_loader = DataLoader(trainset, sampler=RandomSampler(trainset), batch_size=args.bs,
                              num_workers=workers, pin_memory=True)
    test_loader = DataLoader(testset, sampler=SequentialSampler(testset), batch_size=args.bs,
                             num_workers=0)
    return train_loader, test_loader
"""

TUPLE_SCRIPT = """
import torch
from data_utils import get_loader


def train(args, model, optimizer):
    train_loader, test_loader = get_loader(args{workers})
    for epoch in range(10):
        for x, y in train_loader:
            loss = model(x.cuda()).sum()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            for x, y in test_loader:
                model(x.cuda())
"""


def test_a_loader_returned_in_a_tuple_is_judged_by_its_own_keywords(tmp_path: Path) -> None:
    files = {"data_utils.py": TUPLE_HELPER, "train.py": TUPLE_SCRIPT.format(workers=", workers=0")}
    result = check(tmp_path, files, "train.py", ["TD101", "TD102", "TD103"])
    # the training element has num_workers=0 from the call; the test loader (its own 0) is silent
    assert rows(result) == [("TD102", 6)]
    (finding,) = result.findings
    assert [(Path(r.filename).name, r.location.row) for r in finding.related] == [("data_utils.py", 7)]
    assert "get_loader" in finding.related[0].message


def test_a_tuple_loader_with_workers_and_pinning_is_silent_except_for_respawned_workers(tmp_path: Path) -> None:
    files = {"data_utils.py": TUPLE_HELPER, "train.py": TUPLE_SCRIPT.format(workers="")}
    result = check(tmp_path, files, "train.py", ["TD101", "TD102", "TD103"])
    assert rows(result) == [("TD103", 6)]
    assert "4 worker processes" in result.findings[0].message


def test_a_tuple_indexed_with_constants_is_followed_element_by_element(tmp_path: Path) -> None:
    script = TUPLE_SCRIPT.format(workers=", workers=0").replace(
        "train_loader, test_loader = get_loader(args, workers=0)",
        "loaders = get_loader(args, workers=0)\n    train_loader = loaders[0]\n    test_loader = loaders[1]",
    )
    result = check(tmp_path, {"data_utils.py": TUPLE_HELPER, "train.py": script}, "train.py", ["TD102"])
    assert rows(result) == [("TD102", 6)]  # the training element; the test element stays silent


def test_a_tuple_handed_on_whole_is_not_followed(tmp_path: Path) -> None:
    script = TUPLE_SCRIPT.format(workers=", workers=0").replace(
        "train_loader, test_loader = get_loader(args, workers=0)",
        "loaders = get_loader(args, workers=0)\n    register(loaders)\n    train_loader = loaders[0]\n"
        "    test_loader = loaders[1]",
    )
    result = check(tmp_path, {"data_utils.py": TUPLE_HELPER, "train.py": script}, "train.py", ["TD102"])
    assert rows(result) == []


BRANCH_HELPER = """
import torch


def construct_loader(cfg, split):
    dataset = build_dataset(cfg, split)
    if cfg.SHORT_CYCLE and split == "train":
        loader = torch.utils.data.DataLoader(dataset, batch_sampler=make_sampler(cfg),
                                             num_workers=cfg.NUM_WORKERS, pin_memory=True)
    else:
        loader = torch.utils.data.DataLoader(dataset, batch_size=cfg.BS, shuffle=split == "train",
                                             num_workers={workers}, pin_memory=True)
    return loader
"""

BRANCH_SCRIPT = """
import torch
from datasets import loader


def train(cfg, model, optimizer):
    train_loader = loader.construct_loader(cfg, "train")
    val_loader = loader.construct_loader(cfg, "val")
    for epoch in range(cfg.EPOCHS):
        for x, y in train_loader:
            model(x.cuda()).sum().backward()
            optimizer.step()
        evaluate(model, val_loader)
"""


def test_each_branch_of_a_factory_is_a_loader_it_may_return(tmp_path: Path) -> None:
    files = {
        "datasets/__init__.py": "",
        "datasets/loader.py": BRANCH_HELPER.format(workers="0"),
        "train.py": BRANCH_SCRIPT,
    }
    result = check(tmp_path, files, "train.py", ["TD101", "TD102", "TD103"])
    assert rows(result) == [("TD102", 6)]  # the val loader stays silent
    related = result.findings[0].related
    assert [(Path(r.filename).name, r.location.row) for r in related] == [("loader.py", 10)]


def test_branches_whose_keywords_are_unknown_stay_silent(tmp_path: Path) -> None:
    files = {
        "datasets/__init__.py": "",
        "datasets/loader.py": BRANCH_HELPER.format(workers="cfg.NUM_WORKERS"),
        "train.py": BRANCH_SCRIPT,
    }
    assert rows(check(tmp_path, files, "train.py", ["TD101", "TD102", "TD103"])) == []


def test_a_returned_name_also_bound_to_something_else_is_not_a_factory(tmp_path: Path) -> None:
    helper = BRANCH_HELPER.format(workers="0").replace(
        "    return loader", "    if cfg.WRAP:\n        loader = Prefetcher(loader)\n    return loader"
    )
    files = {"datasets/__init__.py": "", "datasets/loader.py": helper, "train.py": BRANCH_SCRIPT}
    assert rows(check(tmp_path, files, "train.py", ["TD102"])) == []


SAMPLER_HELPER = """
import torch


def init_data(dataset, batch_size, world_size=1, rank=0, num_workers=8):
    dist_sampler = torch.utils.data.distributed.DistributedSampler(
        dataset=dataset, num_replicas=world_size, rank=rank)
    data_loader = torch.utils.data.DataLoader(
        dataset, sampler=dist_sampler, batch_size=batch_size, num_workers=num_workers,
        pin_memory=True, persistent_workers=True)
    return (data_loader, dist_sampler)


def shuffle_dataset(loader, epoch):
    loader.sampler.set_epoch(epoch)
"""

SAMPLER_SCRIPT = """
from src.data_manager import init_data


def main(dataset, model, optimizer, epochs):
    (loader,
     sampler) = init_data(dataset, batch_size=64)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            model(x).sum().backward()
            optimizer.step()
"""


def _sampler_files(script: str) -> dict[str, str]:
    return {"src/__init__.py": "", "src/data_manager.py": SAMPLER_HELPER, "train.py": script}


def test_a_helper_built_distributed_sampler_whose_epoch_is_never_set_is_reported_at_the_call(tmp_path: Path) -> None:
    script = SAMPLER_SCRIPT.replace("        sampler.set_epoch(epoch)\n", "")
    result = check(tmp_path, _sampler_files(script), "train.py", ["TD601"])
    assert rows(result) == [("TD601", 6)]
    (finding,) = result.findings
    assert "`init_data`" in finding.message and "loop at line 7" in finding.message
    assert [(Path(r.filename).name, r.location.row) for r in finding.related] == [("data_manager.py", 5)]


def test_set_epoch_in_the_script_or_in_a_project_helper_it_calls_is_silent(tmp_path: Path) -> None:
    assert rows(check(tmp_path, _sampler_files(SAMPLER_SCRIPT), "train.py", ["TD601"])) == []
    helper_sets = SAMPLER_SCRIPT.replace(
        "from src.data_manager import init_data", "from src.data_manager import init_data, shuffle_dataset"
    ).replace("sampler.set_epoch(epoch)", "shuffle_dataset(loader, epoch)")
    assert rows(check(tmp_path, _sampler_files(helper_sets), "train.py", ["TD601"])) == []


def test_a_helper_sampler_iterated_once_or_not_shuffling_is_silent(tmp_path: Path) -> None:
    once = SAMPLER_SCRIPT.replace("        sampler.set_epoch(epoch)\n", "").replace(
        "for epoch in range(epochs):", "if epochs:"
    )
    assert rows(check(tmp_path, _sampler_files(once), "train.py", ["TD601"])) == []
    script = SAMPLER_SCRIPT.replace("        sampler.set_epoch(epoch)\n", "")
    files = _sampler_files(script)
    files["src/data_manager.py"] = SAMPLER_HELPER.replace("rank=rank)", "rank=rank, shuffle=False)")
    assert rows(check(tmp_path, files, "train.py", ["TD601"])) == []


GENERATOR_SCRIPT = """
import torch


def infinite(loader):
    while True:
        yield from loader


def main(ds, model, optimizer, steps):
    loader = torch.utils.data.DataLoader(ds, batch_size=32, shuffle=True, num_workers=4, pin_memory=True)
    batches = infinite(loader)
    for step in range(steps):
        x, y = next(batches)
        model(x.cuda()).sum().backward()
        optimizer.step()
"""


def test_a_generator_that_yields_from_the_loader_in_a_loop_repeats_it(tmp_path: Path) -> None:
    result = check(tmp_path, {"train.py": GENERATOR_SCRIPT}, "train.py", ["TD101", "TD102", "TD103"])
    assert rows(result) == [("TD103", 10)]
    once = GENERATOR_SCRIPT.replace("    while True:\n        yield from loader", "    yield from loader")
    assert rows(check(tmp_path, {"train.py": once}, "train.py", ["TD103"])) == []


def test_a_project_generator_that_yields_from_its_parameter_iterates_it(tmp_path: Path) -> None:
    helper = "def infinite(loader):\n    while True:\n        yield from loader\n"
    script = GENERATOR_SCRIPT.replace(helper, "from data import infinite\n").replace(
        "def main(ds, model, optimizer, steps):",
        "def evaluate(ds, model):\n    pass\n\n\ndef main(ds, model, optimizer, steps):",
    )
    files = {"data.py": helper, "train.py": script}
    index = _loader_index(tmp_path, files, "train.py")
    (loader,) = index.loaders
    assert [s.kind for s in loader.sites] == ["for"]
    assert loader.sites[0].related  # cites the ``yield from`` in data.py


def _loader_index(root: Path, files: dict[str, str], target: str) -> LoaderIndex:
    write(root, files)
    path = root / target
    parsed = parse(str(path), path.read_bytes())
    assert not isinstance(parsed, Exception) and isinstance(parsed, tuple)
    source, lines, tree = parsed
    return loader_index(file_context(str(path), source, tree, Settings(), lines))


DISPATCH = {
    "data/__init__.py": """
from .data_pretrain import build_loader_pretrain
from .data_finetune import build_loader_finetune


def build_loader(config, is_pretrain):
    if is_pretrain:
        return build_loader_pretrain(config)
    else:
        return build_loader_finetune(config)
""",
    "data/data_pretrain.py": """
from torch.utils.data import DataLoader, DistributedSampler


def build_loader_pretrain(config):
    dataset = make_dataset(config)
    sampler = DistributedSampler(dataset, shuffle=True)
    return DataLoader(dataset, sampler=sampler, batch_size=64, num_workers=8, pin_memory=True)
""",
    "data/data_finetune.py": """
from torch.utils.data import DataLoader, DistributedSampler


def build_loader_finetune(config):
    train_set, val_set = make_datasets(config)
    sampler_train = DistributedSampler(train_set, shuffle=True)
    sampler_val = DistributedSampler(val_set, shuffle=False)
    train_loader = DataLoader(train_set, sampler=sampler_train, batch_size=64, num_workers=8,
                              pin_memory=True, persistent_workers=True)
    val_loader = DataLoader(val_set, sampler=sampler_val, batch_size=64, num_workers=8,
                            pin_memory=True, persistent_workers=True)
    return train_set, val_set, train_loader, val_loader, None
""",
    "main_finetune.py": """
import torch
from data import build_loader


def main(config, model, optimizer):
    train_set, val_set, train_loader, val_loader, mixup = build_loader(config, {switch})
    for epoch in range(config.EPOCHS):
        {set_epoch}
        for x, y in train_loader:
            model(x.cuda()).sum().backward()
            optimizer.step()
""",
}


def _dispatch(switch: str, set_epoch: str) -> dict[str, str]:
    script = DISPATCH["main_finetune.py"].format(switch=switch, set_epoch=set_epoch)
    return {**DISPATCH, "setup.py": "", "main_finetune.py": script}


def test_a_dispatch_on_a_constant_argument_returns_the_arm_it_takes(tmp_path: Path) -> None:
    # SimMIM's build_loader(config, logger, is_pretrain=False): the two arms return values of
    # different shapes (a loader, a 5-tuple); the call's constant picks the finetune arm
    files = _dispatch("is_pretrain=False", "pass")
    result = check(tmp_path / "a", files, "main_finetune.py", ["TD601"])
    assert rows(result) == [("TD601", 6)]
    assert [(Path(r.filename).name, r.location.row) for r in result.findings[0].related] == [("data_finetune.py", 6)]
    kept = _dispatch("is_pretrain=False", "train_loader.sampler.set_epoch(epoch)")
    assert rows(check(tmp_path / "b", kept, "main_finetune.py", ["TD601"])) == []
    # the switch not known at the call: the returned value's shape cannot be told, nothing said
    unknown = _dispatch("config.PRETRAIN", "pass")
    assert rows(check(tmp_path / "c", unknown, "main_finetune.py", ["TD601"])) == []
