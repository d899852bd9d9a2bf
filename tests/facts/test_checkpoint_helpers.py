"""Checkpoint state lost through project code: save helpers handed the optimizer (scheduler,
scaler) that leave it out, a GAN's second scheduler or scaler, training through an imported
``train_one_epoch``, a periodic checkpoint beside a best-so-far save, load helpers (TD501-TD505)."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, rows
from helpers.snippets import checkpoint_found, checkpoint_run

CHECKPOINT_CODES = ["TD501", "TD502", "TD503", "TD504", "TD505"]

SAVE_HELPER = """
import torch

def save_checkpoint(model, optimizer, epoch, path, scaler=None):
    sd = model.module.state_dict() if hasattr(model, "module") else model.state_dict()
    checkpoint = {"epoch": epoch, "model_state": sd}
    if scaler is not None:
        checkpoint["scaler_state"] = scaler.state_dict()
    torch.save(checkpoint, path)
"""


def _messages(source: str, code: str) -> dict[int, str]:
    return {f.location.row: f.message for f in checkpoint_run(source).findings if f.code == code}


def test_a_save_helper_handed_the_optimizer_that_leaves_it_out_is_td501() -> None:
    found = checkpoint_found(SAVE_HELPER)
    assert ("TD501", 8) in found
    assert "`optimizer.state_dict()`" in _messages(SAVE_HELPER, "TD501")[8]


def test_a_save_helper_that_saves_what_it_is_handed_is_silent() -> None:
    full = SAVE_HELPER.replace('"model_state": sd}', '"model_state": sd, "optimizer": optimizer.state_dict()}')
    assert [c for c, _ in checkpoint_found(full) if c in ("TD501", "TD503")] == []


def test_a_helper_scaler_left_out_is_td503_at_the_save() -> None:
    src = """
    import torch

    def save_model(args, epoch, model, optimizer, loss_scaler):
        to_save = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        save_on_master(to_save, args.output_dir + "/checkpoint-%s.pth" % epoch)

    def save_on_master(*args, **kwargs):
        if is_main_process():
            torch.save(*args, **kwargs)
    """
    assert [(c, r) for c, r in checkpoint_found(src) if c in ("TD501", "TD503")] == [("TD503", 5)]
    assert "`loss_scaler.state_dict()`" in _messages(src, "TD503")[5]


def test_a_helper_that_exports_or_saves_no_position_is_silent() -> None:
    # The weights alone (no step or epoch beside them), and a "best" export: no checkpoint.
    src = """
    import torch

    def save_weights(model, optimizer, path):
        torch.save({"model": model.state_dict()}, path)

    def save_best(model, optimizer, epoch, out):
        torch.save({"model": model.state_dict(), "epoch": epoch}, out + "/model_best.pth")
    """
    assert checkpoint_found(src) == []


def test_a_test_module_save_helper_is_silent(tmp_path: Path) -> None:
    result = check(tmp_path, {"test_ckpt.py": SAVE_HELPER}, "test_ckpt.py", CHECKPOINT_CODES)
    assert rows(result) == []


GAN = """
import torch
import torch.optim as optim

optim_G = optim.Adam(net_G.parameters(), lr=2e-4)
optim_D = optim.Adam(net_D.parameters(), lr=2e-4)
sched_G = optim.lr_scheduler.LambdaLR(optim_G, lambda step: 1 - step / total)
sched_D = optim.lr_scheduler.LambdaLR(optim_D, lambda step: 1 - step / total)
for step in range(1, total + 1):
    loss_fn(net_D(real), net_D(net_G(z).detach())).backward()
    optim_D.step()
    loss_fn(net_D(net_G(z))).backward()
    optim_G.step()
    sched_G.step()
    sched_D.step()
    if step % 1000 == 0:
        torch.save({
            "net_G": net_G.state_dict(),
            "net_D": net_D.state_dict(),
            "optim_G": optim_G.state_dict(),
            "optim_D": optim_D.state_dict(),
            "sched_G": sched_G.state_dict(),
            "sched_D": sched_D.state_dict(),
        }, "model.pt")
"""


def test_a_gans_second_scheduler_left_out_is_td502_naming_it() -> None:
    assert [c for c, _ in checkpoint_found(GAN) if c == "TD502"] == []
    edited = GAN.replace('            "sched_D": sched_D.state_dict(),\n', "")
    assert ("TD502", 16) in checkpoint_found(edited)
    message = _messages(edited, "TD502")[16]
    assert "`sched_D`" in message and "`sched_G`" not in message


GAN_SCALERS = """
import torch
from torch.cuda.amp import GradScaler

class Trainer:
    def __init__(self, amp):
        self.GAN = GAN()
        self.G_scaler = GradScaler(enabled=amp)
        self.D_scaler = GradScaler(enabled=amp)

    def save(self, num):
        save_data = {
            "GAN": self.GAN.state_dict(),
            "G_scaler": self.G_scaler.state_dict(),
            "D_scaler": self.D_scaler.state_dict(),
        }
        torch.save(save_data, self.model_name(num))

    def load(self, num):
        load_data = torch.load(self.model_name(num), weights_only=True)
        self.steps = num * self.save_every
        self.GAN.load_state_dict(load_data["GAN"])
        if "G_scaler" in load_data:
            self.G_scaler.load_state_dict(load_data["G_scaler"])
        if "D_scaler" in load_data:
            self.D_scaler.load_state_dict(load_data["D_scaler"])
"""


def test_gan_scalers_saved_and_restored_by_name_are_silent() -> None:
    assert [c for c, _ in checkpoint_found(GAN_SCALERS) if c in ("TD503", "TD505")] == []


def test_a_gans_second_scaler_left_out_of_the_save_is_td503() -> None:
    edited = GAN_SCALERS.replace('            "G_scaler": self.G_scaler.state_dict(),\n', "")
    assert ("TD503", 15) in checkpoint_found(edited)
    assert "`self.G_scaler`" in _messages(edited, "TD503")[15]


def test_a_gans_second_scaler_not_restored_is_td505_naming_its_owner() -> None:
    edited = GAN_SCALERS.replace('self.D_scaler.load_state_dict(load_data["D_scaler"])', "pass")
    assert ("TD505", 21) in checkpoint_found(edited)
    message = _messages(edited, "TD505")[21]
    assert '"D_scaler"' in message and "`self.D_scaler.load_state_dict(...)`" in message


ENGINE = """
def train_one_epoch(model, criterion, loader, optimizer, device, epoch, loss_scaler):
    for samples, targets in loader:
        loss = criterion(model(samples), targets)
        optimizer.zero_grad()
        loss_scaler(loss, optimizer, parameters=model.parameters())
"""

MAIN = """
import torch
import utils
from engine import train_one_epoch

optimizer = torch.optim.AdamW(model.parameters(), lr=5e-4)
lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 300)
for epoch in range(start_epoch, 300):
    train_one_epoch(model, criterion, loader, optimizer, device, epoch, loss_scaler)
    lr_scheduler.step(epoch)
    utils.save_on_master({
        "model": model.state_dict(),
        "lr_scheduler": lr_scheduler.state_dict(),
        "epoch": epoch,
    }, "checkpoint.pth")
"""

UTILS = """
import torch

def save_on_master(*args, **kwargs):
    if is_main_process():
        torch.save(*args, **kwargs)
"""


def test_training_through_an_imported_train_one_epoch_makes_the_loop_a_training_loop(tmp_path: Path) -> None:
    files = {"main.py": MAIN, "engine.py": ENGINE, "utils.py": UTILS, "setup.py": ""}
    result = check(tmp_path, files, "main.py", ["TD501"])
    assert rows(result) == [("TD501", 10)]
    full = MAIN.replace('"epoch": epoch,', '"epoch": epoch, "optimizer": optimizer.state_dict(),')
    assert rows(check(tmp_path, {**files, "main.py": full}, "main.py", ["TD501"])) == []


def test_an_imported_function_that_is_not_handed_the_optimizer_does_not_train(tmp_path: Path) -> None:
    main = MAIN.replace(
        "train_one_epoch(model, criterion, loader, optimizer, device, epoch, loss_scaler)",
        "train_one_epoch(model, criterion, loader, None, device, epoch, loss_scaler)",
    )
    files = {"main.py": main, "engine.py": ENGINE, "utils.py": UTILS, "setup.py": ""}
    assert rows(check(tmp_path, files, "main.py", ["TD501"])) == []


BESIDE_BEST = """
import torch

optimizer = torch.optim.AdamW(model.parameters())
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 30)
max_accuracy = 0.0
for epoch in range(90):
    for x, y in loader:
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()
    scheduler.step()
    torch.save({"model": model.state_dict(), "epoch": epoch}, "checkpoint.pth")
    acc = evaluate(model)
    if acc >= max_accuracy:
        max_accuracy = acc
        torch.save({
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "epoch": epoch,
        }, "best_model.pth")
"""


def test_a_periodic_checkpoint_without_the_state_only_the_best_save_holds_is_reported() -> None:
    found = checkpoint_found(BESIDE_BEST)
    assert ("TD501", 12) in found and ("TD502", 12) in found
    assert "only the best-so-far or final save holds it" in _messages(BESIDE_BEST, "TD501")[12]


def test_a_periodic_checkpoint_holding_the_state_beside_a_best_save_is_silent() -> None:
    full = BESIDE_BEST.replace(
        '{"model": model.state_dict(), "epoch": epoch}',
        '{"model": model.state_dict(), "optimizer": optimizer.state_dict(), '
        '"scheduler": scheduler.state_dict(), "epoch": epoch}',
    )
    assert [c for c, _ in checkpoint_found(full) if c in ("TD501", "TD502")] == []


LOAD_HELPER = """
import torch

def load_checkpoint(checkpoint_path, model, optimizer=None):
    checkpoint_dict = torch.load(checkpoint_path, map_location="cpu")
    iteration = checkpoint_dict["iteration"]
    if optimizer is not None:
        optimizer.load_state_dict(checkpoint_dict["optimizer"])
    saved_state_dict = checkpoint_dict["model"]
    state_dict = model.module.state_dict() if hasattr(model, "module") else model.state_dict()
    new_state_dict = {}
    for k, v in state_dict.items():
        new_state_dict[k] = saved_state_dict.get(k, v)
    if hasattr(model, "module"):
        model.module.load_state_dict(new_state_dict)
    else:
        model.load_state_dict(new_state_dict)
    return model, optimizer, iteration

def save_checkpoint(model, optimizer, iteration, checkpoint_path):
    torch.save({"model": model.state_dict(), "iteration": iteration,
                "optimizer": optimizer.state_dict()}, checkpoint_path)
"""


def test_a_load_helper_that_rebuilds_the_model_dict_and_restores_everything_is_silent() -> None:
    assert [c for c, _ in checkpoint_found(LOAD_HELPER) if c == "TD505"] == []


def test_a_load_helper_that_drops_the_optimizer_restore_is_one_td505() -> None:
    edited = LOAD_HELPER.replace('optimizer.load_state_dict(checkpoint_dict["optimizer"])', "pass")
    assert [(c, r) for c, r in checkpoint_found(edited) if c == "TD505"] == [("TD505", 14)]


def test_a_load_helper_that_hands_the_loaded_dict_on_is_silent() -> None:
    edited = LOAD_HELPER.replace(
        'optimizer.load_state_dict(checkpoint_dict["optimizer"])', "restore_optimizer(optimizer, checkpoint_dict)"
    )
    assert [c for c, _ in checkpoint_found(edited) if c == "TD505"] == []


def test_a_restore_in_the_other_branch_than_the_load_is_not_the_resume() -> None:
    """A Caffe2 import beside the torch checkpoint's restore: only the restore after the
    ``torch.load`` on its own path is the resume, reported once."""
    src = """
    import torch

    def load_checkpoint(path, model, optimizer=None, convert_from_caffe2=False):
        if convert_from_caffe2:
            blobs = read_caffe2(path)
            model.load_state_dict(convert(blobs), strict=False)
        else:
            checkpoint = torch.load(path, map_location="cpu")
            weights = checkpoint["model_state"]
            weights = rename(weights)
            model.load_state_dict(weights)
            epoch = checkpoint["epoch"]
        return epoch

    def save_checkpoint(path, model, optimizer, epoch):
        torch.save({"epoch": epoch, "model_state": model.state_dict(), "optimizer_state": optimizer.state_dict()}, path)
    """
    assert [(c, r) for c, r in checkpoint_found(src) if c == "TD505"] == [("TD505", 11)]


def test_a_save_of_the_parsed_arguments_holds_no_training_state() -> None:
    """``torch.save(args, "args.pyT")`` (DeiT-style scripts) writes the run's config: it no longer
    stands for a save that may hold the optimizer, so the weights-only checkpoint is reported."""
    src = """
    import argparse
    import torch

    def main(args):
        torch.save(args, args.output_dir + "/args.pyT")
        optimizer = torch.optim.AdamW(model.parameters())
        for epoch in range(args.epochs):
            for x, y in loader:
                optimizer.zero_grad()
                loss_fn(model(x), y).backward()
                optimizer.step()
            torch.save({"model": model.state_dict(), "epoch": epoch}, args.output_dir + "/checkpoint.pth")

    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        args = parser.parse_args()
        main(args)
    """
    assert [(c, r) for c, r in checkpoint_found(src) if c == "TD501"] == [("TD501", 12)]
