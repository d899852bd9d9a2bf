"""Shapes of training code the loader analysis must read as real projects write them:

* a Lightning DataModule that binds its training hook in ``__init__``
  (``self.train_dataloader = self._train_dataloader``), in a script that only calls ``trainer.fit``;
* an epoch loop named ``ep``, in a file whose training step lives in another object (no
  ``backward()`` of its own);
* a loader turned into one iterator (``it = iter(loader)``) that every epoch draws from: one pass;
* a loader rebound only under a condition inside the epoch loop (``if changed: loader = ...``);
* a ``**kwargs`` dict bound in each branch next to its own DataLoader.
"""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, rows

DATAMODULE = """
import lightning.pytorch as pl
from torch.utils.data import DataLoader


class DataModuleFromConfig(pl.LightningDataModule):
    def __init__(self, batch_size, train=None, validation=None, num_workers=None):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers if num_workers is not None else batch_size * 2
        if train is not None:
            self.train_dataloader = self._train_dataloader
        if validation is not None:
            self.val_dataloader = self._val_dataloader

    def setup(self, stage=None):
        self.datasets = {"train": build("train"), "validation": build("validation")}

    def _train_dataloader(self):
        return DataLoader(self.datasets["train"], batch_size=self.batch_size, num_workers={workers}, shuffle=True)

    def _val_dataloader(self):
        return DataLoader(self.datasets["validation"], batch_size=self.batch_size, num_workers=0)


def main(model, config):
    data = DataModuleFromConfig(**config.data)
    trainer = pl.Trainer(accelerator="gpu", max_epochs=10)
    trainer.fit(model, data)
"""


def test_a_training_hook_bound_in_init_is_the_training_loader(tmp_path: Path) -> None:
    result = check(tmp_path, {"main.py": DATAMODULE.replace("{workers}", "0")}, "main.py", ["TD102", "TD103"])
    assert rows(result) == [("TD102", 19)]  # the validation hook's 0 workers stay silent
    assert "`num_workers` is 0" in result.findings[0].message
    workers = DATAMODULE.replace("{workers}", "4")
    result = check(tmp_path, {"main.py": workers}, "main.py", ["TD102", "TD103"])
    assert rows(result) == [("TD103", 19)]
    assert "Lightning iterates this `train_dataloader` every epoch" in result.findings[0].message


def test_a_method_not_bound_to_the_hook_is_not_a_training_loader(tmp_path: Path) -> None:
    unbound = DATAMODULE.replace("{workers}", "0").replace(
        "self.train_dataloader = self._train_dataloader", "self.sample_loader = self._train_dataloader"
    )
    assert rows(check(tmp_path, {"main.py": unbound}, "main.py", ["TD102"])) == []


EP_SCRIPT = """
from torch.utils.data import DataLoader
from trainer import Trainer


def train_one_ep(ep, loader, trainer):
    for it, (inp, label) in enumerate(loader):
        trainer.train_step(inp, label)


def main(args, dataset):
    ld_train = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=0)
    trainer = Trainer(args)
    for ep in range(args.start_ep, args.ep):
        train_one_ep(ep, ld_train, trainer)
"""

TRAINER_MODULE = """
class Trainer:
    def __init__(self, args):
        self.args = args

    def train_step(self, inp, label):
        self.model(inp.cuda()).sum().backward()
"""


def test_an_epoch_loop_named_ep_drives_training_done_elsewhere(tmp_path: Path) -> None:
    files = {"trainer.py": TRAINER_MODULE, "train.py": EP_SCRIPT}
    result = check(tmp_path, files, "train.py", ["TD102"])
    assert rows(result) == [("TD102", 11)]
    assert "`num_workers` is 0" in result.findings[0].message
    # a counter that is not an epoch's, even with an epoch bound: not an epoch loop by itself
    bounded = EP_SCRIPT.replace("for ep in range(args.start_ep, args.ep):", "for _ in range(args.epochs):").replace(
        "train_one_ep(ep, ld_train", "train_one_ep(0, ld_train"
    )
    files["train.py"] = bounded
    assert rows(check(tmp_path, files, "train.py", ["TD102"])) == []


def test_a_loop_over_steps_in_a_file_that_does_not_train_drives_nothing(tmp_path: Path) -> None:
    steps = EP_SCRIPT.replace("for ep in range(args.start_ep, args.ep):", "for step in range(args.steps):").replace(
        "train_one_ep(ep, ld_train", "train_one_ep(step, ld_train"
    )
    assert rows(check(tmp_path, {"trainer.py": TRAINER_MODULE, "train.py": steps}, "train.py", ["TD102"])) == []


ITER_SCRIPT = """
import torch
from torch.utils.data import DataLoader


def train_one_epoch(batches, iters, model, optimizer):
    for i, (x, y) in zip(range(iters), batches):
        model(x.cuda()).sum().backward()
        optimizer.step()


def main(args, dataset, model):
    optimizer = torch.optim.AdamW(model.parameters())
    ld_train = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=8, pin_memory=True)
    iters = len(ld_train)
    ld_train = iter(ld_train)
    for epoch in range(args.epochs):
        train_one_epoch(ld_train, iters, model, optimizer)
"""


def test_one_iterator_drawn_from_every_epoch_starts_its_workers_once(tmp_path: Path) -> None:
    assert rows(check(tmp_path, {"train.py": ITER_SCRIPT}, "train.py", ["TD102", "TD103"])) == []
    each_epoch = ITER_SCRIPT.replace("    ld_train = iter(ld_train)\n", "").replace(
        "train_one_epoch(ld_train,", "train_one_epoch(iter(ld_train),"
    )
    result = check(tmp_path, {"train.py": each_epoch}, "train.py", ["TD103"])
    assert rows(result) == [("TD103", 13)]
    assert "8 worker processes" in result.findings[0].message


REBOUND_SCRIPT = """
import torch
from torch.utils.data import DataLoader


def main(args, dataset, model, optimizer):
    train_loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=8, pin_memory=True)
    for epoch in range(args.epochs):
        if args.long_cycle and epoch in args.cycle_epochs:
            train_loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=8,
                                      pin_memory=True, persistent_workers=True)
        for x, y in train_loader:
            model(x.cuda()).sum().backward()
            optimizer.step()
"""


def test_a_loader_rebound_only_under_a_condition_still_reaches_the_loop(tmp_path: Path) -> None:
    result = check(tmp_path, {"train.py": REBOUND_SCRIPT}, "train.py", ["TD103"])
    assert rows(result) == [("TD103", 6)]  # the rebuilt one keeps its workers
    assert "loop at line 7" in result.findings[0].message
    always = REBOUND_SCRIPT.replace(
        "        if args.long_cycle and epoch in args.cycle_epochs:\n", "        if True:\n"
    )
    always = always.replace("        if True:\n            train_loader", "        train_loader").replace(
        "\n                                      pin_memory=True, persistent_workers=True)",
        "\n                                  pin_memory=True, persistent_workers=True)",
    )
    # rebuilt unconditionally at the top of every epoch: the first loader is never iterated there
    assert rows(check(tmp_path, {"train.py": always}, "train.py", ["TD103"])) == []


BRANCH_KWARGS = """
import torch
from torch.utils.data import DataLoader


def main(args, dataset, model, optimizer):
    if args.multiepoch:
        kwargs = {"num_workers": 0, "pin_memory": True}
        loader = DataLoader(dataset, batch_size=64, sampler=make_sampler(dataset), **kwargs)
    else:
        kwargs = {"num_workers": 4, "pin_memory": True, "persistent_workers": True}
        loader = DataLoader(dataset, batch_size=64, shuffle=True, **kwargs)
    for epoch in range(args.epochs):
        for x, y in loader:
            model(x.cuda()).sum().backward()
            optimizer.step()
"""


def test_a_kwargs_dict_bound_in_each_branch_is_read_in_its_own_branch(tmp_path: Path) -> None:
    result = check(tmp_path, {"train.py": BRANCH_KWARGS}, "train.py", ["TD101", "TD102", "TD103"])
    assert rows(result) == [("TD102", 8)]
    assert "`num_workers` is 0" in result.findings[0].message
    # a rebinding between the dict and its use: unknown, silent
    rebound = BRANCH_KWARGS.replace(
        "        loader = DataLoader(dataset, batch_size=64, sampler=",
        "        if args.fast:\n            kwargs = fast_kwargs()\n        loader = DataLoader(dataset, batch_size=64, sampler=",
    )
    assert rows(check(tmp_path, {"train.py": rebound}, "train.py", ["TD102"])) == []
