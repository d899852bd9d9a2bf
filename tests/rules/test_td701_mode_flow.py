"""TD701 on where a model's mode comes from: a helper that returns it after ``eval()``, a
module-level model that only ever gets ``.train()``, a trainer class with a project base class,
``model.train(was_training)`` that puts back a saved mode, helpers that set the mode before the
evaluation, a model unpacked from a helper's tuple."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, checked_rows

MODELS = """
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 2))

        def forward(self, x):
            return self.body(x)
    """

LOADERS = """
    import torch
    from models import Net

    def load_for_eval(path):
        model = Net()
        model.load_state_dict(torch.load(path))
        model.eval()
        return model.cuda()

    def build(path):
        model = Net().cuda()
        model.load_state_dict(torch.load(path))
        return model

    def wrapped(path):
        inner = Net()
        return torch.nn.DataParallel(inner.eval())
    """

SCORE = """
    import torch
    from loaders import {loader}

    def score(path, loader):
        net = {loader}(path)
        total = 0
        with torch.no_grad():
            for x, y in loader:
                total += (net(x).argmax(1) == y).sum().item()
        return total
    """


def test_a_helper_that_returns_the_model_after_eval_leaves_it_in_eval(tmp_path: Path) -> None:
    for i, loader in enumerate(["load_for_eval", "wrapped"]):
        files = {"models.py": MODELS, "loaders.py": LOADERS, "score.py": SCORE.format(loader=loader)}
        assert checked_rows(tmp_path / str(i), files, "score.py", ["TD701"]) == [], loader
    # a helper that builds and loads without eval() hands back a module in training mode
    files = {"models.py": MODELS, "loaders.py": LOADERS, "score.py": SCORE.format(loader="build")}
    result = check(tmp_path / "b", files, "score.py", ["TD701"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD701", 9)]
    assert "`net` is evaluated in training mode" in result.findings[0].message
    assert "Dropout" in result.findings[0].message


def test_a_local_helper_that_returns_the_model_after_eval(tmp_path: Path) -> None:
    script = """
        import torch
        from torch import nn

        def load(path, train):
            model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
            model.load_state_dict(torch.load(path))
            if not train:
                model.eval()
            return model

        def export(path, x):
            model = load(path, False)
            with torch.no_grad():
                return model(x)
        """
    # ``model.eval()`` under a condition: the helper may return either mode, so nothing is said
    assert checked_rows(tmp_path / "a", {"export.py": script}, "export.py", ["TD701"]) == []
    always = script.replace("            if not train:\n                model.eval()\n", "            model.eval()\n")
    assert checked_rows(tmp_path / "b", {"export.py": always}, "export.py", ["TD701"]) == []


GLOBAL = """
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.2), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    @torch.no_grad()
    def estimate_loss(batches):
        losses = []
        for x, y in batches:
            losses.append(nn.functional.cross_entropy(model(x), y).item())
        model.train()
        return sum(losses) / len(losses)

    for step in range(100):
        if step % 10 == 0:
            print(estimate_loss(val_batches))
        x, y = next(train_batches)
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    """


def test_module_level_model_whose_evaluation_only_restores_training_mode(tmp_path: Path) -> None:
    # the trailing model.train() shows the function is entered in the caller's mode: training
    result = check(tmp_path / "a", {"train.py": GLOBAL}, "train.py", ["TD701"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD701", 11)]
    assert "`model` is evaluated in training mode" in result.findings[0].message
    # an eval() anywhere in the file (here: on another name) makes the mode unknown
    other = GLOBAL.replace(
        "    for step in range(100):\n", "    ema = model\n    ema.eval()\n    for step in range(100):\n"
    )
    assert checked_rows(tmp_path / "b", {"train.py": other}, "train.py", ["TD701"]) == []
    # handed to a project helper that sets its mode: unknown
    helper = "def summarise(m):\n    m.eval()\n    return m\n"
    handed = GLOBAL.replace("    for step in range(100):\n", "    summarise(model)\n    for step in range(100):\n")
    handed = handed.replace(
        "    from torch import nn\n", "    from torch import nn\n    from report import summarise\n", 1
    )
    files = {"train.py": handed, "report.py": helper}
    assert checked_rows(tmp_path / "c", files, "train.py", ["TD701"]) == []


CIFAR = """
    import torch
    import torch.nn as nn
    import wandb

    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Flatten(), nn.LazyLinear(10))
    net = torch.nn.DataParallel(net)
    head = nn.Linear(net.module[3].in_features, 10)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    wandb.watch(net)

    def train(epoch):
        net.train()
        for x, y in trainloader:
            optimizer.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            optimizer.step()

    def test(epoch):
        correct = 0
        with torch.no_grad():
            for x, y in testloader:
                correct += (net(x).argmax(1) == y).sum().item()
        return correct

    for epoch in range(10):
        train(epoch)
        test(epoch)
    """


def test_module_level_model_set_to_training_by_another_function(tmp_path: Path) -> None:
    assert checked_rows(tmp_path / "a", {"train.py": CIFAR}, "train.py", ["TD701"]) == [("TD701", 22)]
    # an outside function that may switch it to eval mode for good (an exporter): unknown
    exported = CIFAR.replace("wandb.watch(net)", "torch.onnx.export(net, x, 'net.onnx')")
    assert checked_rows(tmp_path / "b", {"train.py": exported}, "train.py", ["TD701"]) == []
    fixed = CIFAR.replace("        correct = 0\n", "        correct = 0\n        net.eval()\n")
    assert checked_rows(tmp_path / "c", {"train.py": fixed}, "train.py", ["TD701"]) == []


BASE = """
    class BaseTrainer:
        def __init__(self, model, epochs):
            self.model = model
            self.epochs = epochs

        def train(self):
            for epoch in range(self.epochs):
                self._train_epoch(epoch)
                self._valid_epoch(epoch)
    """

TRAINER = """
    import torch
    from torch import nn
    from base import BaseTrainer

    class Trainer(BaseTrainer):
        def __init__(self, model, loader, val_loader):
            super().__init__(model, 10)
            self.model = nn.DataParallel(model)
            self.loader, self.val_loader = loader, val_loader
            self.net = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.3))
            self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)

        def _train_epoch(self, epoch):
            self.net.train()
            for x, y in self.loader:
                self.optimizer.zero_grad()
                nn.functional.cross_entropy(self.net(x), y).backward()
                self.optimizer.step()

        def _valid_epoch(self, epoch):
            with torch.no_grad():
                for x, y in self.val_loader:
                    out = self.net(x)
    """


def test_trainer_class_with_a_project_base_class(tmp_path: Path) -> None:
    files = {"base.py": BASE, "trainer.py": TRAINER}
    assert checked_rows(tmp_path / "a", files, "trainer.py", ["TD701"]) == [("TD701", 23)]
    # the base class's module puts a model in eval mode somewhere: unknown
    evaluating = BASE + "\n        def test(self):\n            self.model.eval()\n"
    files = {"base.py": evaluating, "trainer.py": TRAINER}
    assert checked_rows(tmp_path / "b", files, "trainer.py", ["TD701"]) == []
    # a base class that is itself a module (its submodules follow its caller's mode): unknown
    module_base = "from torch import nn\n\nclass BaseTrainer(nn.Module):\n    pass\n"
    files = {"base.py": module_base, "trainer.py": TRAINER}
    assert checked_rows(tmp_path / "c", files, "trainer.py", ["TD701"]) == []


RESTORE = """
    import torch
    from torch import nn

    class Runner(object):
        def __init__(self, loader, val_loader):
            self.net = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
            self.opt = torch.optim.SGD(self.net.parameters(), lr=0.1)
            self.loader, self.val_loader = loader, val_loader

        def step(self):
            for x, y in self.loader:
                self.opt.zero_grad()
                nn.functional.mse_loss(self.net(x), y).backward()
                self.opt.step()

        @torch.no_grad()
        def evaluate(self):
            was_training = self.net.training
            {set_mode}
            out = [self.net(x) for x, _ in self.val_loader]
            self.net.train(was_training)
            return out
    """


def test_train_with_the_saved_mode_puts_back_the_mode_it_had(tmp_path: Path) -> None:
    fires = RESTORE.format(set_mode="pass")
    assert checked_rows(tmp_path / "a", {"run.py": fires}, "run.py", ["TD701"]) == [("TD701", 20)]
    fixed = RESTORE.format(set_mode="self.net.eval()")
    assert checked_rows(tmp_path / "b", {"run.py": fixed}, "run.py", ["TD701"]) == []


ENGINE = """
    import torch

    def train_one_epoch(model, loader, optimizer):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()

    def prepare_eval(model):
        model.eval()
    """

MAIN = """
    import torch
    from models import Net
    from engine import train_one_epoch, prepare_eval

    def build():
        model = Net()
        ema = Net()
        return model, ema

    def main(train_loader, val_loader):
        model, ema = build()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            train_one_epoch(model, train_loader, optimizer)
            {between}
            with torch.no_grad():
                correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)
    """


def test_helpers_handed_the_model_set_its_mode_before_the_evaluation(tmp_path: Path) -> None:
    files = {"models.py": MODELS, "engine.py": ENGINE, "main.py": MAIN.format(between="pass")}
    result = check(tmp_path / "a", files, "main.py", ["TD701"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD701", 17)]
    assert "`model` is evaluated in training mode" in result.findings[0].message
    files["main.py"] = MAIN.format(between="prepare_eval(model)")
    assert checked_rows(tmp_path / "b", files, "main.py", ["TD701"]) == []


SOME_CALLERS = """
    import copy
    import torch
    from torch import nn
    from models import Net

    @torch.no_grad()
    def validate(model, loader):
        return [model(x) for x, _ in loader]

    def main(loader, val_loader):
        model = torch.nn.DataParallel(Net()).to("cuda")
        model = torch.nn.DataParallel(model)
        ema = copy.deepcopy(model)
        ema.load_state_dict(torch.load("ema.pt"))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(5):
            model.train()
            for x, y in loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            validate(model, val_loader)
            validate(ema_model(ema), val_loader)
    """


def test_a_helper_called_with_a_training_model_among_others(tmp_path: Path) -> None:
    # ``ema_model(ema)`` is of unknown mode; the call at line 22 passes the training model
    files = {"models.py": MODELS, "train.py": SOME_CALLERS}
    result = check(tmp_path / "a", files, "train.py", ["TD701"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD701", 8)]
    finding = result.findings[0]
    assert "when `validate` is called at line 22" in finding.message
    (related,) = finding.related
    assert related.location is not None and related.location.row == 22
    # without ``model.train()``: a fresh module, wrapped twice (``model = DataParallel(model)`` reads
    # the binding before it), is in training mode as well
    fresh = SOME_CALLERS.replace("            model.train()\n", "")
    assert checked_rows(tmp_path / "c", {"models.py": MODELS, "train.py": fresh}, "train.py", ["TD701"]) == [
        ("TD701", 8)
    ]
    # put in eval mode before that call: nothing left to report
    fixed = SOME_CALLERS.replace(
        "            validate(model, val_loader)", "            model.eval()\n            validate(model, val_loader)"
    )
    assert checked_rows(tmp_path / "b", {"models.py": MODELS, "train.py": fixed}, "train.py", ["TD701"]) == []
