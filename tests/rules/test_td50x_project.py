"""Checkpoints saved through another project module: a helper that saves the dict it is handed
(a function, or a method of a project class held in an attribute), a helper that builds the dict
itself and tells the caller's resume what the checkpoint holds, a helper that saves a model's and
an optimizer's state in two files."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check

CODES = ["TD501", "TD502", "TD503", "TD504", "TD505"]

SAVER = """
    import os
    import shutil
    import torch

    class Saver:
        def __init__(self, args):
            self.directory = os.path.join("run", args.name)

        def save_checkpoint(self, state, is_best, filename="checkpoint.pth.tar"):
            filename = os.path.join(self.directory, filename)
            torch.save(state, filename)
            if is_best:
                shutil.copyfile(filename, os.path.join(self.directory, "model_best.pth.tar"))

    def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
        torch.save(state, filename)
        if is_best:
            shutil.copyfile(filename, "model_best.pth.tar")
    """

TRAINER = """
    import torch
    from utils.saver import Saver

    class Trainer:
        def __init__(self, args, model):
            self.args = args
            self.saver = Saver(args)
            self.model = model
            self.optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
            if args.resume is not None:
                checkpoint = torch.load(args.resume)
                args.start_epoch = checkpoint["epoch"]
                self.model.load_state_dict(checkpoint["state_dict"])
                OPT_RESTORE

        def training(self, epoch, loader):
            self.model.train()
            for image, target in loader:
                self.optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(self.model(image), target)
                loss.backward()
                self.optimizer.step()
            self.saver.save_checkpoint({
                "epoch": epoch + 1,
                "state_dict": self.model.state_dict(),
                SAVED_OPT
                "rng": torch.get_rng_state(),
            }, False)
    """


def _trainer(restore: bool, saved: bool) -> str:
    return TRAINER.replace(
        "OPT_RESTORE", 'self.optimizer.load_state_dict(checkpoint["optimizer"])' if restore else "pass"
    ).replace("SAVED_OPT", '"optimizer": self.optimizer.state_dict(),' if saved else "")


def _rows(result):  # type: ignore[no-untyped-def]
    return [(f.code, f.location.row) for f in result.findings]


def test_a_method_of_a_project_class_that_saves_the_dict_it_is_handed(tmp_path: Path) -> None:
    files = {"utils/__init__.py": "", "utils/saver.py": SAVER, "train.py": _trainer(True, True), "pyproject.toml": ""}
    assert check(tmp_path, files, "train.py", CODES).findings == []
    # the resume forgets the optimizer the checkpoint holds: reported at the model restore, the
    # helper's torch.save cited
    files["train.py"] = _trainer(False, True)
    result = check(tmp_path, files, "train.py", CODES)
    assert _rows(result) == [("TD505", 13)]
    finding = result.findings[0]
    assert 'optimizer (saved as "optimizer")' in finding.message
    assert [(r.filename.endswith("utils/saver.py"), r.location.row) for r in finding.related] == [(True, 11)]


def test_the_dict_handed_to_a_project_save_helper_is_judged_where_it_is_built(tmp_path: Path) -> None:
    # the optimizer left out of the dict built in train.py: TD501 at the helper's call
    files = {"utils/__init__.py": "", "utils/saver.py": SAVER, "train.py": _trainer(False, False), "pyproject.toml": ""}
    result = check(tmp_path, files, "train.py", CODES)
    assert _rows(result) == [("TD501", 23)]
    finding = result.findings[0]
    assert "not the state of `self.optimizer`" in finding.message
    assert [(r.filename.endswith("utils/saver.py"), r.location.row) for r in finding.related] == [(True, 11)]


PLAIN_HELPER_CALLER = """
    import torch
    from utils.saver import save_checkpoint

    def main(args, model, loader):
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        for epoch in range(args.epochs):
            for x, y in loader:
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
            save_checkpoint({"epoch": epoch, "state_dict": model.state_dict(), "rng": torch.get_rng_state()},
                            is_best=False, filename=f"checkpoint_{epoch}.pth.tar")
    """


def test_a_function_of_a_project_module_that_saves_its_parameter(tmp_path: Path) -> None:
    files = {"utils/__init__.py": "", "utils/saver.py": SAVER, "train.py": PLAIN_HELPER_CALLER, "pyproject.toml": ""}
    result = check(tmp_path, files, "train.py", CODES)
    assert _rows(result) == [("TD501", 11)]
    full = PLAIN_HELPER_CALLER.replace(
        '"state_dict": model.state_dict(),', '"state_dict": model.state_dict(), "optimizer": optimizer.state_dict(),'
    )
    files["train.py"] = full
    assert check(tmp_path, files, "train.py", CODES).findings == []


# A helper that builds the checkpoint itself (MAE/DeiT ``misc.save_model``); the script resumes
# from the file it writes.
MISC = """
    import torch

    def save_on_master(*args, **kwargs):
        torch.save(*args, **kwargs)

    def save_model(args, epoch, model_without_ddp, optimizer, loss_scaler):
        to_save = {
            "model": model_without_ddp.state_dict(),
            "optimizer": optimizer.state_dict(),
            "epoch": epoch,
            "scaler": loss_scaler.state_dict(),
            "args": args,
        }
        save_on_master(to_save, f"{args.output_dir}/checkpoint-last.pth")
    """

MAIN = """
    import torch
    import util.misc as misc
    from engine import train_one_epoch

    def main(args, model, loader):
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        loss_scaler = torch.amp.GradScaler()
        if args.resume:
            checkpoint = torch.load(args.resume + "/checkpoint-last.pth", map_location="cpu")
            model.load_state_dict(checkpoint["model"])
            if "optimizer" in checkpoint and "epoch" in checkpoint:
                OPT_RESTORE
                args.start_epoch = checkpoint["epoch"] + 1
                SCALER_RESTORE
        for epoch in range(args.start_epoch, args.epochs):
            train_one_epoch(model, loader, optimizer, loss_scaler)
            misc.save_model(args=args, epoch=epoch, model_without_ddp=model, optimizer=optimizer,
                            loss_scaler=loss_scaler)
    """
ENGINE = """
    def train_one_epoch(model, loader, optimizer, loss_scaler):
        for x, y in loader:
            loss = model(x, y)
            loss_scaler.scale(loss).backward()
            loss_scaler.step(optimizer)
            loss_scaler.update()
            optimizer.zero_grad()
    """


def _main(opt: bool, scaler: bool) -> str:
    return MAIN.replace("OPT_RESTORE", 'optimizer.load_state_dict(checkpoint["optimizer"])' if opt else "pass").replace(
        "SCALER_RESTORE", 'loss_scaler.load_state_dict(checkpoint["scaler"])' if scaler else "pass"
    )


def test_a_resume_against_the_checkpoint_a_project_helper_writes(tmp_path: Path) -> None:
    files = {
        "util/__init__.py": "",
        "util/misc.py": MISC,
        "engine.py": ENGINE,
        "main.py": _main(True, True),
        "pyproject.toml": "",
    }
    assert check(tmp_path, files, "main.py", ["TD505"]).findings == []
    files["main.py"] = _main(True, False)
    result = check(tmp_path, files, "main.py", ["TD505"])
    assert _rows(result) == [("TD505", 10)]
    finding = result.findings[0]
    assert 'GradScaler (saved as "scaler")' in finding.message
    assert [(r.filename.endswith("util/misc.py"), r.location.row) for r in finding.related] == [(True, 14)]
    files["main.py"] = _main(False, True)
    assert 'optimizer (saved as "optimizer")' in check(tmp_path, files, "main.py", ["TD505"]).findings[0].message


# nanochat's shape: the helper saves the model's state and the optimizer's in two files.
MANAGER = """
    import os
    import torch

    def save_checkpoint(checkpoint_dir, step, model_data, optimizer_data, meta_data):
        os.makedirs(checkpoint_dir, exist_ok=True)
        torch.save(model_data, os.path.join(checkpoint_dir, f"model_{step:06d}.pt"))
        if optimizer_data is not None:
            torch.save(optimizer_data, os.path.join(checkpoint_dir, f"optim_{step:06d}.pt"))
    """
RL = """
    import torch
    from nanochat.checkpoint_manager import save_checkpoint

    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(1000):
        loss = model(next(batches))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step > 0 and step % 100 == 0:
            save_checkpoint("ckpt", step, model.state_dict(), OPTIMIZER, {"step": step})
    """


def test_a_helper_that_saves_the_model_and_the_optimizer_it_is_handed_in_two_files(tmp_path: Path) -> None:
    files = {
        "nanochat/__init__.py": "",
        "nanochat/checkpoint_manager.py": MANAGER,
        "rl.py": RL.replace("OPTIMIZER", "optimizer.state_dict()"),
        "pyproject.toml": "",
    }
    assert [f.code for f in check(tmp_path, files, "rl.py", ["TD501"]).findings] == []
    files["rl.py"] = RL.replace("OPTIMIZER", "None")
    assert _rows(check(tmp_path, files, "rl.py", ["TD501"])) == [("TD501", 12)]


# A helper that copies a checkpoint into memory (``torch.save(ckpt, io.BytesIO())``) is no save,
# and one named like a load is never asked about.
EMA_UTILS = """
    import io
    import torch

    def _load_checkpoint_for_ema(model_ema, checkpoint):
        mem_file = io.BytesIO()
        torch.save(checkpoint, mem_file)
        mem_file.seek(0)
        model_ema._load_checkpoint(mem_file)

    def save_to_buffer(state):
        buffer = io.BytesIO()
        torch.save(state, buffer)
        return buffer
    """
EMA_MAIN = """
    import torch
    import utils

    def main(args, model, model_ema, loader):
        optimizer = torch.optim.AdamW(model.parameters())
        for epoch in range(args.epochs):
            for x, y in loader:
                optimizer.zero_grad()
                model(x, y).backward()
                optimizer.step()
            utils._load_checkpoint_for_ema(model_ema, extra_state())
            utils.save_to_buffer(extra_state())
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                       "checkpoint.pth")
    """


def test_in_memory_copies_are_no_saves(tmp_path: Path) -> None:
    files = {"utils.py": EMA_UTILS, "main.py": EMA_MAIN, "pyproject.toml": ""}
    # the checkpoint has no RNG state: the copies into memory must not hide that
    assert _rows(check(tmp_path, files, "main.py", CODES)) == [("TD504", 13)]
