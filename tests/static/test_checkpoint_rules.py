"""Checkpoint rules (TD501-TD507) on whole, realistic training scripts, through the real engine.

The rule classes' own examples cover one situation each; these tests run condensed versions of
the shapes real projects use (an ImageNet-style script with a ``save_checkpoint`` helper, a
GPT trainer class, a tutorial that only keeps ``best.pt``, a GAN, the torchvision-references
layout, an accelerate script) and assert every finding: code, row, message and fix.
"""

from __future__ import annotations

import ast
import textwrap

from traindoctor.check.engine import check_source, file_context, instantiate
from traindoctor.config import Settings
from traindoctor.facts.checkpoint.static.index import checkpoint_index
from traindoctor.static.vocab import MODEL, OPTIMIZER, SCALER, SCHEDULER

CODES = ["TD501", "TD502", "TD503", "TD504", "TD505", "TD506", "TD507"]


def run(source: str, min_torch: str = "2.13", fix: bool = False, unsafe: bool = False):
    source = textwrap.dedent(source).lstrip("\n")
    result = check_source(
        source,
        "train.py",
        Settings(min_torch_version=min_torch),
        instantiate(CODES),
        fix=fix,
        unsafe_fixes=unsafe,
    )
    assert not result.internal_errors, result.internal_errors
    return result


def found(source: str, **kw) -> list[tuple[str, int]]:
    return sorted((f.code, f.location.row) for f in run(source, **kw).findings)


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
    result = run(IMAGENET_STYLE)
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
    got = found(GPT_TRAINER)
    # The scaler and RNG are not saved, resume forgets the optimizer, and the loop overwrites
    # the very file resume reads.
    assert got == [("TD503", 31), ("TD504", 31), ("TD505", 15), ("TD507", 31)]
    result = run(GPT_TRAINER)
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
    assert run(BEST_ONLY_TUTORIAL).findings == []


def test_best_model_save_read_back_by_a_resume_path_is_a_checkpoint():
    resumed = BEST_ONLY_TUTORIAL.replace(
        "best_acc = 0.0\n",
        'best_acc = 0.0\nif args.resume:\n    net.load_state_dict(torch.load("best.pth"))\n',
    )
    result = run(resumed)
    codes = [(f.code, f.location.row) for f in result.findings if f.code in ("TD501", "TD504")]
    assert codes == [("TD501", 20), ("TD504", 20)]


def test_lone_weights_only_save_in_the_loop_fires():
    periodic = BEST_ONLY_TUTORIAL.replace(
        "    if acc > best_acc:\n        best_acc = acc\n", "    if True:\n        pass\n"
    )
    periodic = periodic.replace('"best.pth"', '"ckpt.pth"')
    result = run(periodic)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD501", 18), ("TD504", 18)]
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
    assert found(src) == []


DCGAN_STYLE = """
import torch
import torch.optim as optim

netG = Generator().to(device)
netD = Discriminator().to(device)
optimizerD = optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
for epoch in range(25):
    for i, data in enumerate(dataloader, 0):
        netD.zero_grad()
        errD = criterion(netD(data[0]), label)
        errD.backward()
        optimizerD.step()
        netG.zero_grad()
        errG = criterion(netD(netG(noise)), label)
        errG.backward()
        optimizerG.step()
    torch.save(netG.state_dict(), "%s/netG_epoch_%d.pth" % (outf, epoch))
    torch.save(netD.state_dict(), "%s/netD_epoch_%d.pth" % (outf, epoch))
"""


def test_gan_weight_snapshots_every_epoch():
    assert found(DCGAN_STYLE) == [("TD501", 18), ("TD501", 19), ("TD504", 18), ("TD504", 19)]


def test_gan_td501_names_the_optimizer_of_the_saved_model():
    """pytorch/examples dcgan: each snapshot's advice names the optimizer built over that
    model's parameters (netG -> optimizerG), not the first optimizer of the file."""
    messages = {f.location.row: f.message for f in run(DCGAN_STYLE).findings if f.code == "TD501"}
    assert "`optimizerG.state_dict()`" in messages[18]
    assert "`optimizerD.state_dict()`" in messages[19]


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
    assert found(TORCHVISION_REFERENCES) == [("TD504", 30)]


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
    assert found(ACCELERATE_SCRIPT) == []


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
    assert found(src) == []


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
    assert found(src) == []


def test_opaque_save_elsewhere_silences_weights_only_finding():
    src = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(90):
        for x, y in loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        torch.save(model.state_dict(), "model.pt")
        torch.save(trainer_state(), "state.pt")
    """
    assert found(src) == []


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
    assert found(src) == []


def test_mid_epoch_checkpoint_needs_data_position_and_all_rngs():
    src = """
    import random
    import numpy as np
    import torch

    model = Net().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        for x, y in loader:
            x = augment(x, np.random.rand())
            if random.random() < 0.5:
                x = x.flip(-1)
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
            if want_checkpoint():
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "rng": torch.get_rng_state(), "epoch": epoch}, "ckpt.pt")
    """
    result = run(src)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD504", 16)]
    msg = result.findings[0].message
    assert msg.startswith(
        "This checkpoint misses the CUDA generators, NumPy's global generator, "
        "Python's `random` generator, the data position within the epoch"
    )
    assert "`np.random.get_state()`" in msg and "`random.getstate()`" in msg


def test_resume_reads_every_saved_key_through_get():
    src = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ckpt = torch.load("ckpt.pt", weights_only=True)
    model.load_state_dict(ckpt["model"])
    restore_optimizer(optimizer, ckpt.get("optimizer"))
    for epoch in range(3):
        train(model, loader, optimizer)
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "rng": torch.get_rng_state()}, f"ckpt_{epoch}.pt")
    """
    assert found(src) == []


def test_unsafe_torch_load_fixes():
    src = """
    import torch

    a = torch.load("a.pt", weights_only=False)
    b = torch.load("b.pt")
    """
    assert found(src) == [("TD506", 3)]
    assert found(src, min_torch="2.5") == [("TD506", 3), ("TD506", 4)]
    # Only unsafe fixes: --fix alone changes nothing.
    assert run(src, min_torch="2.5", fix=True).fixed_source is None
    fixed = run(src, min_torch="2.5", fix=True, unsafe=True).fixed_source
    assert fixed == (
        'import torch\n\na = torch.load("a.pt", weights_only=True)\nb = torch.load("b.pt", weights_only=True)\n'
    )
    assert found(fixed, min_torch="2.5") == []
    finding = run(src).findings[0]
    assert finding.fix is not None and finding.fix.applicability == "unsafe"


def test_unsafe_torch_load_variable_value_is_silent_but_constant_is_read():
    src = """
    import torch

    SAFE = False
    a = torch.load("a.pt", weights_only=SAFE)
    b = torch.load("b.pt", weights_only=trusted)
    """
    result = run(src)
    assert [(f.code, f.location.row) for f in result.findings] == [("TD506", 4)]
    assert result.findings[0].fix is None  # never rewrite a shared constant


def test_atomic_write_pattern_and_per_step_files_are_silent():
    src = """
    import os
    import tempfile
    import torch

    if os.path.exists(args.ckpt):
        state = torch.load(args.ckpt, weights_only=True)
    for step, batch in enumerate(loader):
        loss = model(batch)
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            fd, tmp_path = tempfile.mkstemp(dir=os.path.dirname(args.ckpt))
            torch.save(model.state_dict(), tmp_path)
            os.replace(tmp_path, args.ckpt)
    """
    assert [c for c, _ in found(src)] == []


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
    assert found(src) == [("TD506", 8)]


def test_findings_are_deterministic():
    first = [(f.code, f.location.row, f.message) for f in run(GPT_TRAINER).findings]
    for _ in range(3):
        assert [(f.code, f.location.row, f.message) for f in run(GPT_TRAINER).findings] == first


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
    codes = [c for c, _ in found(src)]
    assert "TD507" not in codes and "TD505" not in codes


# ------------------------------------------------------------------ precision on real-code shapes

PLAIN_SGD_SNAPSHOT = """
import torch

def train(model, loader, epochs):
    optimizer = torch.optim.SGD(model.parameters(), {args})
    for epoch in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        torch.save({{"model": model.state_dict(), "epoch": epoch}}, "snapshot.pt")
"""


def test_td501_silent_for_plain_sgd_without_momentum():
    # ddp-tutorial shape: SGD(lr=...) keeps no per-parameter state, so nothing is lost.
    assert ("TD501", 10) not in found(PLAIN_SGD_SNAPSHOT.format(args="lr=1e-3"))
    assert ("TD501", 10) not in found(PLAIN_SGD_SNAPSHOT.format(args="lr=1e-3, momentum=0"))


def test_td501_fires_for_sgd_with_momentum_or_unknown_momentum():
    assert ("TD501", 10) in found(PLAIN_SGD_SNAPSHOT.format(args="lr=0.1, momentum=0.9"))
    assert ("TD501", 10) in found(PLAIN_SGD_SNAPSHOT.format(args="0.1, 0.9"))
    assert ("TD501", 10) in found(PLAIN_SGD_SNAPSHOT.format(args="lr=0.1, momentum=m"))


def test_td501_argparse_namespace_named_opt_is_no_optimizer():
    # dcgan shape: ``opt = parser.parse_args()`` and an image dump whose path reads ``opt.outf``
    # must not count as an external save that might hold the optimizer.
    src = """
    import argparse
    import torch
    import torch.optim as optim
    import torchvision.utils as vutils

    parser = argparse.ArgumentParser()
    opt = parser.parse_args()
    optimizerD = optim.Adam(netD.parameters(), lr=2e-4)
    for epoch in range(25):
        for i, data in enumerate(dataloader, 0):
            netD.zero_grad()
            criterion(netD(data[0]), label).backward()
            optimizerD.step()
            vutils.save_image(data[0], "%s/real_samples.png" % opt.outf)
        torch.save(netD.state_dict(), "%s/netD_epoch_%d.pth" % (opt.outf, epoch))
    """
    assert ("TD501", 15) in found(src)


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
    assert ("TD501", 10) in found(HOOK_SAVE.format(hook="on_epoch_end"))


def test_a_save_in_a_one_off_hook_stays_an_export() -> None:
    assert found(HOOK_SAVE.format(hook="on_predict")) == []
