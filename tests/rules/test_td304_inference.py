"""TD304 in inference and evaluation code of a trained model: not training, not reported; the
same deprecated call in code a training script runs is."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, checked_rows

TRANSCRIBE = """
    import torch
    from torch.cuda.amp import autocast
    from utils import load_model

    def transcribe(path, audio):
        model = load_model(path)
        with autocast():
            return model(audio)
    """

UTILS = """
    import torch
    from models import Net

    def load_model(path):
        model = Net()
        model.load_state_dict(torch.load(path))
        model.eval()
        return model
    """

MODELS = """
    from torch import nn

    class Net(nn.Linear):
        pass
    """

CLI = """
    import sys
    from inference import transcribe

    if __name__ == "__main__":
        print(transcribe(sys.argv[1], sys.argv[2]))
    """

TRAIN = """
    import torch
    from inference import transcribe
    from models import Net

    if __name__ == "__main__":
        model = Net()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        print(transcribe("last.pt", sample))
    """


def test_library_function_used_only_by_inference_scripts(tmp_path: Path) -> None:
    files = {"inference.py": TRANSCRIBE, "utils.py": UTILS, "models.py": MODELS, "transcribe.py": CLI}
    # a test of the library is no user of it that matters
    files["tests/test_inference.py"] = "from inference import transcribe\n\ndef test_it():\n    transcribe('a', 'b')\n"
    assert checked_rows(tmp_path / "a", files, "inference.py", ["TD304"]) == []


def test_library_function_that_a_training_script_calls(tmp_path: Path) -> None:
    files = {"inference.py": TRANSCRIBE, "utils.py": UTILS, "models.py": MODELS, "transcribe.py": CLI}
    files["train.py"] = TRAIN
    result = check(tmp_path, files, "inference.py", ["TD304"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD304", 7)]
    assert "`torch.cuda.amp.autocast(...)` is deprecated" in result.findings[0].message


def test_library_function_nobody_imports_stays_reported(tmp_path: Path) -> None:
    files = {"inference.py": TRANSCRIBE, "utils.py": UTILS, "models.py": MODELS}
    assert checked_rows(tmp_path, files, "inference.py", ["TD304"]) == [("TD304", 7)]


VALIDATE = """
    import torch

    def main(loader):
        model = torch.load("checkpoint.pth")
        model.eval()
        with torch.no_grad(), torch.cuda.amp.autocast():
            return [model(x) for x, _ in loader]

    if __name__ == "__main__":
        main(loader)
    """


def test_validation_script_of_a_trained_checkpoint(tmp_path: Path) -> None:
    assert checked_rows(tmp_path / "a", {"validate.py": VALIDATE}, "validate.py", ["TD304"]) == []
    # the same script fine-tuning the checkpoint first trains
    tuned = VALIDATE.replace(
        "        model.eval()\n",
        "        torch.optim.SGD(model.parameters(), lr=0.1).step()\n        model.eval()\n",
    )
    assert checked_rows(tmp_path / "b", {"validate.py": tuned}, "validate.py", ["TD304"]) == [("TD304", 7)]


ENGINE = """
    import torch

    def train_one_epoch(model, loader, optimizer, loss_scaler):
        for x, y in loader:
            with torch.cuda.amp.autocast():
                loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss_scaler(loss, optimizer, parameters=model.parameters())

    @torch.no_grad()
    def evaluate(loader, model):
        model.eval()
        with torch.cuda.amp.autocast():
            return [model(x) for x, _ in loader]
    """

MAIN = """
    import torch
    from timm.optim import create_optimizer
    from timm.utils import NativeScaler
    from engine import train_one_epoch, evaluate

    def main(args, model, loader, val_loader):
        model.load_state_dict(torch.load(args.resume)["model"])
        optimizer = create_optimizer(args, model)
        for epoch in range(args.epochs):
            train_one_epoch(model, loader, optimizer, NativeScaler())
            evaluate(val_loader, model)

    if __name__ == "__main__":
        main(parse(), build(), train_loader, val_loader)
    """


def test_training_through_a_loss_scaler_is_training(tmp_path: Path) -> None:
    # no ``backward()`` anywhere: the scaler runs it; ``zero_grad``, the optimizer factory and the
    # epoch loop say training
    result = check(tmp_path, {"engine.py": ENGINE, "main.py": MAIN}, "engine.py", ["TD304"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD304", 5), ("TD304", 13)]
