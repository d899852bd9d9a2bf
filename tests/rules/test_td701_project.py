"""TD701 across modules: an ``evaluate(model, loader)`` helper of another module that leaves the
mode to its caller, and models named through a timm registry or a dict of project classes."""

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

    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Linear(8, 2)

        def forward(self, x):
            return self.body(x)
    """

ENGINE = """
    import torch

    def train_one_epoch(model, loader, optimizer):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()

    @torch.no_grad()
    def evaluate(loader, model):
        return sum((model(x).argmax(1) == y).sum().item() for x, y in loader)

    @torch.no_grad()
    def evaluate_eval(loader, model):
        model.eval()
        return sum((model(x).argmax(1) == y).sum().item() for x, y in loader)
    """


def _train(model: str, evaluate: str = "evaluate", before: str = "") -> str:
    return f"""
    import torch
    from models import Net, Plain
    from engine import train_one_epoch, evaluate, evaluate_eval

    def main(train_loader, val_loader):
        model = {model}
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(3):
            train_one_epoch(model, train_loader, optimizer)
            {before or "pass"}
            acc = {evaluate}(val_loader, model)
    """


def test_helper_of_another_module_evaluating_a_model_in_training_mode(tmp_path: Path) -> None:
    files = {"models.py": MODELS, "engine.py": ENGINE, "train.py": _train("Net()")}
    result = check(tmp_path, files, "train.py", ["TD701"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD701", 11)]
    finding = result.findings[0]
    assert "`evaluate` evaluates it without calling `eval()`" in finding.message
    assert "Dropout" in finding.message
    (related,) = finding.related
    assert related.filename.endswith("engine.py") and related.location.row == 12
    # the helper's own file is not reported again: it has no caller there
    assert checked_rows(tmp_path, files, "engine.py", ["TD701"]) == []


def test_helper_calls_left_alone_when_the_mode_is_set(tmp_path: Path) -> None:
    cases = [
        _train("Net()", evaluate="evaluate_eval"),  # the helper calls eval() itself
        _train("Net()", before="model.eval()"),  # the caller does
        _train("Net()", before="evaluate_eval(val_loader, model)"),  # an earlier helper did
        _train("Plain()"),  # nothing mode-dependent in the model
        _train("load_model()"),  # a model the files do not describe
    ]
    for i, train in enumerate(cases):
        root = tmp_path / str(i)
        files = {"models.py": MODELS, "engine.py": ENGINE, "train.py": train}
        assert checked_rows(root, files, "train.py", ["TD701"]) == [], train


def test_helper_in_a_test_file_is_not_training(tmp_path: Path) -> None:
    files = {"models.py": MODELS, "engine.py": ENGINE, "test_train.py": _train("Net()")}
    assert checked_rows(tmp_path, files, "test_train.py", ["TD701"]) == []


def test_timm_registered_model_of_the_project(tmp_path: Path) -> None:
    registry = """
        from timm.models.registry import register_model
        from models import Net

        def _factory(width):
            model = Net()
            return model

        @register_model
        def tiny_net(pretrained=False):
            return _factory(8)
        """
    train = _train('timm.create_model("tiny_net")').replace(
        "import torch\n", "import torch\n    import timm\n    import registry\n", 1
    )
    files = {"models.py": MODELS, "engine.py": ENGINE, "registry.py": registry, "train.py": train}
    assert checked_rows(tmp_path, files, "train.py", ["TD701"]) == [("TD701", 13)]
    unknown = train.replace('"tiny_net"', '"resnet50"')
    assert checked_rows(tmp_path / "u", {**files, "train.py": unknown}, "train.py", ["TD701"]) == []


def test_model_from_a_dict_of_project_classes(tmp_path: Path) -> None:
    gen = """
        import torch
        import models

        nets = {"net": models.Net, "other": models.Net}
        mixed = {"net": models.Net, "plain": models.Plain}

        def generate(arch, n):
            net = nets[arch]().cuda()
            with torch.no_grad():
                return [net(torch.randn(4, 8)) for _ in range(n)]

        def generate_mixed(arch, n):
            net = mixed[arch]().cuda()
            with torch.no_grad():
                return [net(torch.randn(4, 8)) for _ in range(n)]
        """
    files = {"models.py": MODELS, "gen.py": gen}
    assert checked_rows(tmp_path, files, "gen.py", ["TD701"]) == [("TD701", 10)]


VALIDATE = """
    import torch
    from torch import nn

    def validate(model, loader):
        {first}
        with torch.no_grad():
            for x, y in loader:
                loss = nn.functional.mse_loss(model(x), y)
                {inside}
        model.train()

    def train(loader, val_loader):
        model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            model.train()
            for x, y in loader:
                nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            validate(model, val_loader)
    """


def test_helper_that_restores_training_mode_after_evaluating(tmp_path: Path) -> None:
    # the model.train() after the loop does not put the model in eval mode before it
    fires = VALIDATE.format(first="pass", inside="pass")
    assert checked_rows(tmp_path / "a", {"train.py": fires}, "train.py", ["TD701"]) == [("TD701", 8)]
    ok = VALIDATE.format(first="model.eval()", inside="pass")
    assert checked_rows(tmp_path / "b", {"train.py": ok}, "train.py", ["TD701"]) == []
    # a mode call in the loop around the forward may run before it
    looped = VALIDATE.format(first="pass", inside="model.eval()")
    assert checked_rows(tmp_path / "c", {"train.py": looped}, "train.py", ["TD701"]) == []
