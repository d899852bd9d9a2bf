"""TD501 checkpoint-without-optimizer: static and runtime.

Model-only saves: plain SGD, GAN snapshots, a whole model saved; at run time torch.save intercepted.
"""

from __future__ import annotations

import io
from pathlib import Path

import torch
from helpers.project_tree import check, rows
from helpers.rule_loops import codes, finding, images, line_of, model_and_momentum_sgd, train_steps
from helpers.snippets import checkpoint_found, checkpoint_run
from torch import nn

import traindoctor

# ------------------------------------------------------------------ traindoctor check
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
    # Bare weight snapshots: TD501 alone (its fix, a full-state checkpoint, also saves the RNG
    # state), as `traindoctor run` judges the same saves; TD504 is for checkpoints that hold
    # resume state beside the weights.
    # The two weight files written one after the other are one checkpoint: one finding, at its
    # first file, the other file a related location.
    assert checkpoint_found(DCGAN_STYLE) == [("TD501", 18)]


def test_gan_td501_names_the_optimizer_of_each_saved_model():
    """pytorch/examples dcgan: the advice names the optimizer built over each saved model's
    parameters (netG -> optimizerG, netD -> optimizerD), not the first optimizer of the file."""
    (found,) = [f for f in checkpoint_run(DCGAN_STYLE).findings if f.code == "TD501"]
    assert found.location.row == 18
    assert "`optimizerG.state_dict()` and `optimizerD.state_dict()`" in found.message
    assert [(r.location.row, r.message) for r in found.related] == [(19, "another weights file of this checkpoint")]


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
    assert checkpoint_found(src) == []


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
    assert ("TD501", 10) not in checkpoint_found(PLAIN_SGD_SNAPSHOT.format(args="lr=1e-3"))
    assert ("TD501", 10) not in checkpoint_found(PLAIN_SGD_SNAPSHOT.format(args="lr=1e-3, momentum=0"))


def test_td501_fires_for_sgd_with_momentum_or_unknown_momentum():
    assert ("TD501", 10) in checkpoint_found(PLAIN_SGD_SNAPSHOT.format(args="lr=0.1, momentum=0.9"))
    assert ("TD501", 10) in checkpoint_found(PLAIN_SGD_SNAPSHOT.format(args="0.1, 0.9"))
    assert ("TD501", 10) in checkpoint_found(PLAIN_SGD_SNAPSHOT.format(args="lr=0.1, momentum=m"))


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
    assert ("TD501", 15) in checkpoint_found(src)


def test_whole_model_saved_every_epoch_without_optimizer_is_a_model_only_checkpoint(tmp_path):
    files = {
        "model.py": "import torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.conv = nn.Conv2d(1, 8, 3)\n",
        "main.py": """
        import torch
        from model import Net

        device = torch.device("cuda")
        model = Net().to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

        def checkpoint(epoch):
            torch.save(model, f"model_epoch_{epoch}.pth")

        for epoch in range(1, 30):
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x.to(device)), y.to(device))
                loss.backward()
                optimizer.step()
            checkpoint(epoch)
        """,
    }
    result = check(tmp_path, files, "main.py", ["TD501"])
    assert rows(result) == [("TD501", 9)]


# ------------------------------------------------------------------ traindoctor run
def test_td501_weights_only_checkpoint(tmp_path: Path) -> None:
    model, opt = model_and_momentum_sgd()
    loss_fn = nn.CrossEntropyLoss()
    with traindoctor.watch(select=["TD501"]) as doctor:
        for step in range(2):
            x, y = images(8, seed=step)
            loss_fn(model(x), y).backward()
            opt.step()
            opt.zero_grad()
            torch.save(model.state_dict(), tmp_path / "last.pt")  # weights-only save
    f = finding(doctor, "TD501")
    assert f.filename == __file__ and f.location.row == line_of("# weights-only save")
    assert f.evidence == {"path": str(tmp_path / "last.pt"), "missing_optimizers": ["SGD"], "optimizer_states_saved": 0}
    assert f.step == 1


def test_td501_weights_export_after_training_is_not_a_checkpoint(tmp_path: Path) -> None:
    """The shared definition (traindoctor.facts.checkpoint.kinds): weights saved after the training
    loop, never read back, are an export; the checker is silent on the same code."""
    model, opt = model_and_momentum_sgd()
    with traindoctor.watch(select=["TD501", "TD504"]) as doctor:
        train_steps(model, opt, steps=2)
        torch.save(model.state_dict(), tmp_path / "model_final.pt")
    assert codes(doctor) == []


def test_td501_silent_with_optimizer_state_or_in_memory_copy(tmp_path: Path) -> None:
    model, opt = model_and_momentum_sgd()
    with traindoctor.watch(select=["TD501"]) as doctor:
        train_steps(model, opt, steps=2)
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "ck.pt")
        torch.save(model.state_dict(), io.BytesIO())  # a deep copy through a buffer
        torch.save({"embedding": torch.randn(3, 3)}, tmp_path / "other.pt")  # not the model
    assert codes(doctor) == []


def test_td501_matches_copied_weights_by_keys(tmp_path: Path) -> None:
    model, opt = model_and_momentum_sgd()
    with traindoctor.watch(select=["TD501"]) as doctor:
        train_steps(model, opt, steps=1)
        cpu_copy = {k: v.clone() for k, v in model.state_dict().items()}
        torch.save({"state_dict": cpu_copy, "epoch": 1}, tmp_path / "ck.pt")
    assert codes(doctor) == ["TD501"]


GAN_PARTIAL = """
import torch

def train(net_G, net_D, loader):
    optim_G = torch.optim.Adam(net_G.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optim_D = torch.optim.Adam(net_D.parameters(), lr=2e-4, betas=(0.5, 0.999))
    for step, x in enumerate(loader):
        loss_D = net_D(x).mean() - net_D(net_G(torch.randn(8, 128))).mean()
        optim_D.zero_grad()
        loss_D.backward()
        optim_D.step()
        loss_G = -net_D(net_G(torch.randn(8, 128))).mean()
        optim_G.zero_grad()
        loss_G.backward()
        optim_G.step()
        torch.save({"net_G": net_G.state_dict(), "net_D": net_D.state_dict(),
                    "optim_G": optim_G.state_dict()}, "model.pt")
"""


def test_a_checkpoint_without_one_of_two_optimizers_is_reported_with_the_missing_one():
    (f,) = [f for f in checkpoint_run(GAN_PARTIAL).findings if f.code == "TD501"]
    assert f.location.row == 15  # the torch.save (the snippet's first line is its import)
    assert "not of `optim_D`" in f.message and "`optim_D.state_dict()`" in f.message


def test_every_optimizer_saved_or_the_missing_one_stateless_is_silent():
    both = GAN_PARTIAL.replace(
        '"optim_G": optim_G.state_dict()}', '"optim_G": optim_G.state_dict(), "optim_D": optim_D.state_dict()}'
    )
    assert [f.code for f in checkpoint_run(both).findings if f.code == "TD501"] == []
    sgd = GAN_PARTIAL.replace(
        "optim_D = torch.optim.Adam(net_D.parameters(), lr=2e-4, betas=(0.5, 0.999))",
        "optim_D = torch.optim.SGD(net_D.parameters(), lr=0.01)",
    )
    assert [f.code for f in checkpoint_run(sgd).findings if f.code == "TD501"] == []
