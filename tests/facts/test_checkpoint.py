"""Checkpoint facts (facts/checkpoint/), through the real engine on whole, realistic scripts: what a
save holds (read through helpers, pickled objects, unknown functions, traindoctor's and
accelerate's own saves), checkpoint vs export, one dict saved to two paths, saves in test code,
resume analysis; and the runtime audit of ``traindoctor.checkpoint.save``.
"""

from __future__ import annotations

import ast
import random
import textwrap
from pathlib import Path

import numpy as np
import torch
from helpers.project_tree import checked_rows
from helpers.rule_loops import codes, finding, images, line_of, model_and_momentum_sgd
from helpers.snippets import checkpoint_found, checkpoint_run, found
from torch import nn

import traindoctor
from traindoctor.check.engine import file_context
from traindoctor.config import Settings
from traindoctor.facts.checkpoint.static.index import checkpoint_index
from traindoctor.static.vocab import MODEL, OPTIMIZER, SCALER, SCHEDULER


# ------------------------------------------------------------------ traindoctor check
def index(source: str):
    source = textwrap.dedent(source).lstrip("\n")
    ctx = file_context("train.py", source, ast.parse(source), Settings(min_torch_version="2.13"))
    return checkpoint_index(ctx)


IMAGENET_STYLE = """
import shutil
import torch

def main(args):
    model = torch.nn.DataParallel(build(args.arch)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9, weight_decay=1e-4)
    if args.resume:
        checkpoint = torch.load(args.resume, weights_only=True)
        args.start_epoch = checkpoint["epoch"]
        model.load_state_dict(checkpoint["state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer"])
    for epoch in range(args.start_epoch, args.epochs):
        adjust_learning_rate(optimizer, epoch, args)
        train(train_loader, model, criterion, optimizer, epoch)
        acc1 = validate(val_loader, model, criterion)
        save_checkpoint({
            "epoch": epoch + 1,
            "state_dict": model.state_dict(),
            "best_acc1": acc1,
            "optimizer": optimizer.state_dict(),
        }, acc1 > 0)

def train(loader, model, criterion, optimizer, epoch):
    model.train()
    for i, (images, target) in enumerate(loader):
        loss = criterion(model(images.cuda()), target.cuda())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

def save_checkpoint(state, is_best, filename="checkpoint.pth.tar"):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, "model_best.pth.tar")
"""


def test_imagenet_style_script_only_misses_rng():
    result = checkpoint_run(IMAGENET_STYLE)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD504", 16)]
    msg = result.findings[0].message
    assert "no RNG state" in msg
    assert "`torch.get_rng_state()`" in msg and "`torch.cuda.get_rng_state_all()`" in msg
    # The epoch-boundary save needs no data position.
    assert "data position" not in msg


def test_imagenet_style_helper_site_is_read_through_the_caller():
    idx = index(IMAGENET_STYLE)
    (site,) = idx.saves.sites
    assert site.report.lineno == 16 and site.call.lineno == 32
    assert site.in_training_loop and not site.mid_epoch
    assert site.saved.keys_of(MODEL) == ["state_dict"]
    assert site.saved.keys_of(OPTIMIZER) == ["optimizer"]
    assert idx.loops.trains


GPT_TRAINER = """
import os
import torch
from torch.nn.parallel import DistributedDataParallel as DDP

class Trainer:
    def setup(self, args):
        self.model = GPT(args)
        if args.init_from == "resume":
            ckpt_path = os.path.join(args.out_dir, "ckpt.pt")
            checkpoint = torch.load(ckpt_path, map_location=self.device)
            state_dict = checkpoint["model"]
            for k in list(state_dict):
                if k.startswith("_orig_mod."):
                    state_dict[k[10:]] = state_dict.pop(k)
            self.model.load_state_dict(state_dict)
            self.iter_num = checkpoint["iter_num"]
        self.model.to("cuda")
        self.scaler = torch.cuda.amp.GradScaler(enabled=(args.dtype == "float16"))
        self.optimizer = self.model.configure_optimizers(args.weight_decay, args.lr)
        self.raw_model = self.model

    def train(self, args):
        while True:
            if self.iter_num % args.eval_interval == 0:
                checkpoint = {
                    "model": self.raw_model.state_dict(),
                    "optimizer": self.optimizer.state_dict(),
                    "iter_num": self.iter_num,
                    "config": vars(args),
                }
                torch.save(checkpoint, os.path.join(args.out_dir, "ckpt.pt"))
            for micro_step in range(args.grad_accum):
                with self.ctx:
                    logits, loss = self.model(self.X, self.Y)
                self.X, self.Y = self.get_batch("train")
                self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            self.iter_num += 1
"""


def test_gpt_trainer_class():
    got = checkpoint_found(GPT_TRAINER)
    # The scaler and RNG are not saved, resume forgets the optimizer, and the loop overwrites
    # the very file resume reads.
    assert got == [("TD503", 31), ("TD504", 31), ("TD505", 15), ("TD507", 31)]
    result = checkpoint_run(GPT_TRAINER)
    by_code = {f.code: f for f in result.findings}
    assert "`self.scaler.state_dict()`" in by_code["TD503"].message
    assert 'optimizer (saved as "optimizer")' in by_code["TD505"].message
    # Saved inside the step loop, and "iter_num" records the position.
    assert "data position" not in by_code["TD504"].message
    assert "CUDA generators" not in by_code["TD504"].message  # nothing at all is saved: "no RNG"
    assert "no RNG state" in by_code["TD504"].message


BEST_ONLY_TUTORIAL = """
import torch
import torch.nn as nn
import torch.optim as optim

net = Net()
criterion = nn.CrossEntropyLoss()
optimizer = optim.Adam(net.parameters(), lr=1e-3)
best_acc = 0.0
for epoch in range(20):
    for inputs, labels in trainloader:
        optimizer.zero_grad()
        loss = criterion(net(inputs), labels)
        loss.backward()
        optimizer.step()
    acc = evaluate(net, testloader)
    if acc > best_acc:
        best_acc = acc
        torch.save(net.state_dict(), "best.pth")
"""


def test_best_model_export_without_a_resume_path_is_an_export():
    """Issue 9: one definition of checkpoint vs export (``traindoctor.facts.checkpoint.kinds``): a
    weights-only save under a best-so-far test, never read back, is an export (silent)."""
    assert checkpoint_run(BEST_ONLY_TUTORIAL).findings == []


def test_best_model_save_read_back_by_a_resume_path_is_a_checkpoint():
    resumed = BEST_ONLY_TUTORIAL.replace(
        "best_acc = 0.0\n",
        'best_acc = 0.0\nif args.resume:\n    net.load_state_dict(torch.load("best.pth"))\n',
    )
    result = checkpoint_run(resumed)
    codes = [(f.code, f.location.row) for f in result.findings if f.code in ("TD501", "TD504")]
    assert codes == [("TD501", 20)]  # a bare weights save: TD501 alone, as run judges it


def test_lone_weights_only_save_in_the_loop_fires():
    periodic = BEST_ONLY_TUTORIAL.replace(
        "    if acc > best_acc:\n        best_acc = acc\n", "    if True:\n        pass\n"
    )
    periodic = periodic.replace('"best.pth"', '"ckpt.pth"')
    result = checkpoint_run(periodic)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD501", 18)]  # TD501 alone, as run
    td501 = result.findings[0]
    assert td501.message.endswith("save `optimizer.state_dict()` with them.")
    assert td501.help == "Save `optimizer.state_dict()` in the checkpoint"
    assert (td501.location.column, td501.end_location.row) == (9, 18)


def test_best_export_next_to_a_full_checkpoint_is_silent():
    src = (
        BEST_ONLY_TUTORIAL
        + """    torch.save({"net": net.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state(), "epoch": epoch}, "last.pth")
"""
    )
    assert checkpoint_found(src) == []


TORCHVISION_REFERENCES = """
import os
import torch
import utils

def main(args):
    model = build(args)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda") if args.amp else None
    lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    model_without_ddp = model
    if args.resume:
        checkpoint = torch.load(args.resume, map_location="cpu", weights_only=True)
        model_without_ddp.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        lr_scheduler.load_state_dict(checkpoint["lr_scheduler"])
        if scaler:
            scaler.load_state_dict(checkpoint["scaler"])
    for epoch in range(args.start_epoch, args.epochs):
        train_one_epoch(model, criterion, optimizer, data_loader, epoch, args, scaler)
        lr_scheduler.step()
        checkpoint = {
            "model": model_without_ddp.state_dict(),
            "optimizer": optimizer.state_dict(),
            "lr_scheduler": lr_scheduler.state_dict(),
            "epoch": epoch,
            "args": args,
        }
        if scaler:
            checkpoint["scaler"] = scaler.state_dict()
        utils.save_on_master(checkpoint, os.path.join(args.output_dir, f"model_{epoch}.pth"))
        utils.save_on_master(checkpoint, os.path.join(args.output_dir, "checkpoint.pth"))

def train_one_epoch(model, criterion, optimizer, data_loader, epoch, args, scaler=None):
    for image, target in data_loader:
        with torch.autocast("cuda", enabled=scaler is not None):
            loss = criterion(model(image), target)
        optimizer.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
"""


def test_torchvision_references_layout():
    idx = index(TORCHVISION_REFERENCES)
    assert [s.report.lineno for s in idx.saves.sites] == [30, 31]
    site = idx.saves.sites[0]
    assert site.saved.keys_of(SCALER) == ["scaler"] and site.saved.keys_of(SCHEDULER) == ["lr_scheduler"]
    # Everything is saved and restored except the RNG state; one dict saved to two paths is
    # one mistake, reported at its first save.
    assert checkpoint_found(TORCHVISION_REFERENCES) == [("TD504", 30)]


ACCELERATE_SCRIPT = """
import torch
from accelerate import Accelerator
from transformers import get_linear_schedule_with_warmup

accelerator = Accelerator()
optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
lr_scheduler = get_linear_schedule_with_warmup(optimizer, 100, 1000)
model, optimizer, loader, lr_scheduler = accelerator.prepare(model, optimizer, loader, lr_scheduler)
for epoch in range(3):
    for step, batch in enumerate(loader):
        accelerator.backward(model(**batch).loss)
        optimizer.step()
        lr_scheduler.step()
        optimizer.zero_grad()
        if step % 500 == 0:
            accelerator.save_state(f"step_{step}")
unwrapped = accelerator.unwrap_model(model)
torch.save(unwrapped.state_dict(), "pytorch_model.bin")
"""


def test_accelerate_save_state_is_complete():
    assert checkpoint_found(ACCELERATE_SCRIPT) == []


def test_traindoctor_checkpoint_save_never_fires():
    src = """
    import torch
    from traindoctor import checkpoint

    scaler = torch.amp.GradScaler()
    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.LinearLR(optimizer)
    for epoch in range(10):
        for x, y in loader:
            scaler.scale(loss_fn(model(x), y)).backward()
            scaler.step(optimizer)
            scaler.update()
            checkpoint.save("last.pt", model=model, optimizer=optimizer, scheduler=scheduler,
                            scaler=scaler, epoch=epoch)
            torch.save(model.state_dict(), "weights.pt")
    state = checkpoint.load("last.pt", model=model, optimizer=optimizer)
    """
    assert checkpoint_found(src) == []


def test_dict_handed_to_an_unknown_function_is_not_judged():
    src = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 30)
    for epoch in range(90):
        train(model, loader, optimizer)
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        add_extras(state)
        torch.save(state, f"epoch_{epoch}.pt")
    """
    # add_extras may put the scheduler and RNG state in: TD502/TD504 stay silent.
    assert checkpoint_found(src) == []


def test_pickled_objects_count_as_their_state():
    src = """
    import torch

    optimizer = torch.optim.AdamW(model.parameters())
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=100)
    for epoch in range(10):
        train(model, loader, optimizer, scheduler)
        torch.save({"model": model, "optimizer": optimizer, "scheduler": scheduler,
                    "rng": torch.get_rng_state()}, "full.pt")
    """
    assert checkpoint_found(src) == []


def test_round_trip_in_the_same_loop_is_not_resume():
    src = """
    import torch

    for step, batch in enumerate(loader):
        loss = model(batch)
        loss.backward()
        optimizer.step()
        torch.save(model, "roundtrip.pt")
        model = torch.load("roundtrip.pt", weights_only=False)  # TD506
    """
    assert checkpoint_found(src) == [("TD506", 8)]


def test_findings_are_deterministic():
    first = [(f.code, f.location.row, f.message) for f in checkpoint_run(GPT_TRAINER).findings]
    for _ in range(3):
        assert [(f.code, f.location.row, f.message) for f in checkpoint_run(GPT_TRAINER).findings] == first


def test_files_without_checkpoints_build_an_empty_index():
    idx = index("import torch\nx = torch.zeros(3)\n")
    assert idx.saves.sites == [] and idx.checkpoints.training_checkpoints() == [] and idx.resume.resume_gaps() == []


def test_reload_after_training_is_not_a_resume():
    src = """
    import torch

    for epoch in range(10):
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
    state = torch.load("last.pt", weights_only=True)
    model.load_state_dict(state["model"])
    """
    codes = [c for c, _ in checkpoint_found(src)]
    assert "TD507" not in codes and "TD505" not in codes


HOOK_SAVE = """
import torch
from transformers import TrainerCallback

model = torch.nn.Linear(4, 2)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)


class SaveWeights(TrainerCallback):
    def {hook}(self, args, state, control, **kwargs):
        torch.save(model.state_dict(), "weights.pt")


for x in loader:
    model(x).sum().backward()
    optimizer.step()
"""


def test_a_save_in_a_per_epoch_framework_hook_is_a_periodic_checkpoint() -> None:
    # The trainer calls ``on_epoch_end`` every epoch: the save repeats like one in the loop.
    assert ("TD501", 10) in checkpoint_found(HOOK_SAVE.format(hook="on_epoch_end"))


def test_a_save_in_a_one_off_hook_stays_an_export() -> None:
    assert checkpoint_found(HOOK_SAVE.format(hook="on_predict")) == []


ROUND_TRIP = """
import torch


def _test_optimizer_step_reload(self, chkpt_file):
    model = torch.nn.Linear(2, 4).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.03)
    for _ in range(20):
        opt.zero_grad()
        model(torch.randn(4, 2).cuda()).sum().backward()
        opt.step()
    torch.save({"optimizer_state_dict": opt.state_dict()}, chkpt_file)
    checkpoint = torch.load(chkpt_file)
    opt.load_state_dict(checkpoint["optimizer_state_dict"])


def test_amp(self):
    scaler = torch.amp.GradScaler("cuda")
"""


def test_a_save_load_round_trip_in_a_test_file_is_no_training_checkpoint(tmp_path):
    files = {"testing/distributed_test.py": ROUND_TRIP}
    assert checked_rows(tmp_path, files, "testing/distributed_test.py", ["TD501", "TD503", "TD504"]) == []


def test_the_same_save_in_a_training_script_is_reported(tmp_path):
    got = checked_rows(tmp_path, {"train.py": ROUND_TRIP}, "train.py", ["TD503", "TD504"])
    assert ("TD504", 11) in got and ("TD503", 11) in got


CKPT = ["TD501", "TD502", "TD503", "TD504"]


TWO_PATHS = """
import os
import torch
import utils

def main(args):
    model = build().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 30)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(args.epochs):
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = model(x.cuda()).sum()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        scheduler.step()
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        utils.save_on_master(state, os.path.join(args.out, "checkpoint.pth"))
        if epoch % 10 == 0:
            utils.save_on_master(state, os.path.join(args.out, f"checkpoint{epoch:04}.pth"))
"""


def test_one_dict_saved_to_two_paths_is_reported_once_per_rule() -> None:
    assert found(TWO_PATHS, CKPT) == [("TD502", 19), ("TD503", 19), ("TD504", 19)]


def test_rebinding_between_the_saves_makes_two_checkpoints() -> None:
    src = TWO_PATHS.replace(
        "        if epoch % 10 == 0:\n",
        '        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}\n'
        "        if epoch % 10 == 0:\n",
    )
    assert found(src, ["TD504"]) == [("TD504", 19), ("TD504", 22)]


def test_same_name_saved_in_two_loops_is_reported_twice() -> None:
    src = """
    import torch

    def train(model, loader, args):
        optimizer = torch.optim.Adam(model.parameters())
        for epoch in range(args.epochs):
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
            ckpt = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(ckpt, "last.pt")
            for i in range(2):
                torch.save(ckpt, f"copy{i}.pt")
    """
    assert found(src, ["TD504"]) == [("TD504", 10), ("TD504", 12)]


def test_model_only_state_dict_saved_twice_gives_one_td501() -> None:
    src = """
    import torch

    model = Net()
    optimizer = torch.optim.Adam(model.parameters())
    for epoch in range(10):
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
        weights = model.state_dict()
        torch.save(weights, "last.pt")
        torch.save(weights, f"epoch{epoch}.pt")
    """
    assert found(src, ["TD501"]) == [("TD501", 10)]


# ------------------------------------------------------------------ traindoctor run
def test_traindoctor_checkpoint_save_satisfies_every_checkpoint_rule(tmp_path: Path) -> None:
    from traindoctor.checkpoint import save

    model, opt = model_and_momentum_sgd()
    data = torch.utils.data.TensorDataset(*images(32))
    with traindoctor.watch(select=["TD501", "TD502", "TD503", "TD504"]) as doctor:
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
        scaler = torch.amp.GradScaler("cpu")
        loader = torch.utils.data.DataLoader(data, batch_size=4, shuffle=True)
        for i, (x, y) in enumerate(loader):
            np.random.rand()
            random.random()
            scaler.scale(nn.functional.cross_entropy(model(x), y)).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            sched.step()
            if i == 2:  # mid-epoch
                save(
                    tmp_path / "last.pt",
                    model=model,
                    optimizer=opt,
                    scheduler=sched,
                    scaler=scaler,
                    step=i + 1,
                    epoch=0,
                )
            if i == 3:  # the same helper without the scheduler: the audit does see the checkpoint
                save(tmp_path / "nosched.pt", model=model, optimizer=opt, scaler=scaler, step=4)  # !
    assert (tmp_path / "last.pt").exists()
    assert codes(doctor) == ["TD502"], [(f.code, f.evidence) for f in doctor.findings]
    f = finding(doctor, "TD502")
    assert f.location.row == line_of("step=4)  # !") and f.evidence["path"] == str(tmp_path / "nosched.pt")
