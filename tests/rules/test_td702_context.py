"""TD702 on what is no evaluation with autograd recording: a loss module called in an evaluation
loop, a function under a project's own no_grad decorator, a model whose ``forward`` turns autograd
off itself; inference scripts are evaluation code like any other."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, checked_rows


def test_a_loss_module_is_no_model(tmp_path: Path) -> None:
    loss = """
        import torch
        from torch import nn

        def compute_loss(predictions, targets):
            bce = nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0]))
            total = torch.zeros(1)
            for layer_predictions, t in zip(predictions, targets):
                total += bce(layer_predictions[..., 4], t)
            return total
        """
    assert checked_rows(tmp_path / "a", {"loss.py": loss}, "loss.py", ["TD702", "TD701"]) == []
    # the same loop running a model is an evaluation forward
    model = loss.replace("nn.BCEWithLogitsLoss(pos_weight=torch.tensor([1.0]))", "nn.Sequential(nn.Linear(4, 4))")
    assert checked_rows(tmp_path / "b", {"loss.py": model}, "loss.py", ["TD702"]) == [("TD702", 8)]


DECORATORS = """
    import functools
    import torch

    def nograd(f):
        def new_f(*args, **kwargs):
            with torch.no_grad():
                return f(*args, **kwargs)
        return new_f

    def timed(f):
        @functools.wraps(f)
        def new_f(*args, **kwargs):
            return f(*args, **kwargs)
        return new_f
    """

DETECTOR = """
    from torch import nn
    from utils import {decorator}

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(8, 4)

        def forward(self, x):
            return self.head(x)

        @{decorator}
        def predict(self, images):
            self.eval()
            return [self(x) for x in images]
    """


def test_a_project_decorator_that_wraps_no_grad(tmp_path: Path) -> None:
    files = {"utils.py": DECORATORS, "detector.py": DETECTOR.format(decorator="nograd")}
    assert checked_rows(tmp_path / "a", files, "detector.py", ["TD702"]) == []
    files = {"utils.py": DECORATORS, "detector.py": DETECTOR.format(decorator="timed")}
    result = check(tmp_path / "b", files, "detector.py", ["TD702"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD702", 15)]
    assert "eval mode with autograd recording" in result.findings[0].message


GENERATOR = """
    import torch
    from torch import nn

    class Pix2Pix(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(8, 8)

        def forward(self, data, mode):
            if mode == "generator":
                return self.net(data).mean()
            {inference}
    """

SAMPLE = """
    import torch
    from models import Pix2Pix

    model = Pix2Pix()
    model.eval()
    for data in dataloader:
        fake = model(data, mode="inference")
    """


def test_a_model_whose_forward_turns_autograd_off(tmp_path: Path) -> None:
    guarded = "with torch.no_grad():\n                return self.net(data)"
    files = {"models.py": GENERATOR.format(inference=guarded), "sample.py": SAMPLE}
    assert checked_rows(tmp_path / "a", files, "sample.py", ["TD702"]) == []
    files = {"models.py": GENERATOR.format(inference="return self.net(data)"), "sample.py": SAMPLE}
    assert checked_rows(tmp_path / "b", files, "sample.py", ["TD702"]) == [("TD702", 7)]


INFER = """
    import torch
    from torch import nn
    {imports}

    def main(loader):
        model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.1), nn.Linear(8, 2))
        model.load_state_dict(torch.load("model.pt"))
        model.eval()
        {train}
        outputs = []
        for x, _ in loader:
            outputs.append(model(x).argmax(1))
        return outputs

    if __name__ == "__main__":
        main(test_loader)
    """

ENGINE = """
    import torch

    def train_one_epoch(model, loader):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
    """


def test_inference_scripts_evaluating_with_autograd_are_reported(tmp_path: Path) -> None:
    """TD702 is evaluation hygiene: an inference script of a trained model that records autograd
    wastes the same memory and time as an evaluation loop of a training script (TD304's "not
    training" exemption does not apply to it)."""
    script = INFER.format(imports="", train="pass")
    assert checked_rows(tmp_path / "a", {"predict.py": script}, "predict.py", ["TD702"]) == [("TD702", 12)]
    drives = INFER.format(
        imports="from engine import train_one_epoch",
        train="train_one_epoch(model, loader)",
    )
    files = {"engine.py": ENGINE, "predict.py": drives}
    assert checked_rows(tmp_path / "b", files, "predict.py", ["TD702"]) == [("TD702", 12)]
    guarded = script.replace(
        "        for x, _ in loader:\n", "        with torch.no_grad():\n          for x, _ in loader:\n"
    )
    guarded = guarded.replace("            outputs.append", "              outputs.append")
    assert checked_rows(tmp_path / "c", {"predict.py": guarded}, "predict.py", ["TD702"]) == []
