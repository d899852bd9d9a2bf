"""`check` and `run` place the same mistake on the same line (issue 25).

Each script is a tiny CPU training loop shaped like a real public script in which the two halves
disagreed: Pytorch-UNet's weights-only snapshot beside a scheduler, pytorch-cifar100's
``save_checkpoint(state)`` helper, bearpaw's train and test loaders that restart their workers
every epoch, PyTorch-GAN's dcgan (two models, two optimizers, a per-sample module transform in a
main-process loader). Both halves run over the same file (``check`` from the file's folder, ``run`` on the
script) and the (code, file, line) of what they report is compared.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from traindoctor.check.cli import main as check_main
from traindoctor.doctor.cli import main as run_main

UNET = """
from pathlib import Path

import torch
import torch.nn as nn


def train_model(model, epochs=3):
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-5, weight_decay=1e-8, momentum=0.999)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, "max", patience=5)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    for epoch in range(1, epochs + 1):
        model.train()
        for i in range(0, 64, 16):
            loss = nn.functional.mse_loss(model(x[i : i + 16]), y[i : i + 16])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        scheduler.step(-loss.item())
        Path("checkpoints").mkdir(exist_ok=True)
        state_dict = model.state_dict()
        state_dict["mask_values"] = [0, 1]
        torch.save(state_dict, "checkpoints/checkpoint_epoch{}.pth".format(epoch))  # SAVE


if __name__ == "__main__":
    train_model(nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1)))
"""

HELPER = """
import torch
import torch.nn as nn


def save_checkpoint(state, filename="checkpoint.pth.tar"):
    torch.save(state, filename)


def main():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    for epoch in range(3):
        for i in range(0, 64, 8):
            idx = torch.randperm(8)
            loss = nn.functional.mse_loss(model(x[i : i + 8][idx]), y[i : i + 8][idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        state = {"epoch": epoch + 1, "state_dict": model.state_dict(), "optimizer": optimizer.state_dict()}
        save_checkpoint(state)  # SAVE


if __name__ == "__main__":
    main()
"""

LOADERS = """
import time

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def slow_start(worker_id):
    time.sleep(0.2)  # opening files, reading an index: what every worker start pays


def main():
    torch.manual_seed(0)
    train_set = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
    test_set = TensorDataset(torch.randn(32, 8), torch.randn(32, 1))
    trainloader = DataLoader(train_set, batch_size=16, shuffle=True, num_workers=1, worker_init_fn=slow_start)  # TRAIN
    testloader = DataLoader(test_set, batch_size=16, num_workers=1, worker_init_fn=slow_start)  # TEST
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(4):
        model.train()
        for x, y in trainloader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            for x, y in testloader:
                nn.functional.mse_loss(model(x), y).item()


if __name__ == "__main__":
    main()
"""


DCGAN = """
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Normalize(nn.Module):
    def forward(self, x):
        return (x - 0.5) / 0.5


class Images(Dataset):
    def __init__(self):
        self.x = torch.rand(128, 3, 8, 8)
        self.transform = Normalize()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.transform(self.x[i])


def main():
    torch.manual_seed(0)
    dataloader = DataLoader(Images(), batch_size=32, shuffle=True, num_workers=0)
    netG = nn.Sequential(nn.Linear(16, 192), nn.Tanh())
    netD = nn.Sequential(nn.Flatten(), nn.Linear(192, 64), nn.BatchNorm1d(64), nn.LeakyReLU(0.2), nn.Linear(64, 1))  # NETD
    criterion = nn.BCEWithLogitsLoss()
    optimizerD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999), weight_decay=1e-4)  # OPTD
    optimizerG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    for epoch in range(2):
        for real in dataloader:
            netD.zero_grad()
            errD_real = criterion(netD(real), torch.ones(len(real), 1))
            errD_real.backward()
            fake = netG(torch.randn(len(real), 16)).view(-1, 3, 8, 8)
            errD_fake = criterion(netD(fake.detach()), torch.zeros(len(real), 1))
            errD_fake.backward()
            optimizerD.step()
            netG.zero_grad()
            errG = criterion(netD(fake), torch.ones(len(real), 1))
            errG.backward()
            optimizerG.step()
        torch.save(netG.state_dict(), "netG_epoch_%d.pth" % epoch)  # SAVE


if __name__ == "__main__":
    main()
"""


def _row(source: str, marker: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if f"# {marker}" in line)


def _both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, codes: str) -> tuple[set, set]:
    """(code, file, row) reported by check and by run for ``codes`` on ``train.py``."""
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(source)
    check_main(["train.py", "--select", codes, "--no-cache", "--output-format", "json", "-o", "check.json"])
    assert run_main(["--select", codes, "--output-format", "json", "-o", "run.json", "train.py"]) == 0

    def rows(items: list) -> set:
        return {(f["code"], f["filename"], f["location"]["row"]) for f in items if f.get("location")}

    checked = json.loads(Path("check.json").read_text())
    ran = json.loads(Path("run.json").read_text())["findings"]
    return rows(checked if isinstance(checked, list) else checked["findings"]), rows(ran)


def test_weights_only_snapshot_beside_a_scheduler_is_td501_alone_in_both(tmp_path, monkeypatch):
    source = textwrap.dedent(UNET)
    checked, ran = _both(tmp_path, monkeypatch, source, "TD501,TD502,TD503,TD504,TD204")
    # one mistake, one finding: the full-state checkpoint TD501 asks for holds the scheduler and
    # the RNG state too; a weight decay of 1e-8 on biases is negligible (TD204 silent)
    assert checked == ran == {("TD501", "train.py", _row(source, "SAVE"))}


def test_a_helper_that_saves_what_it_is_handed_is_reported_at_the_call_in_both(tmp_path, monkeypatch):
    source = textwrap.dedent(HELPER)
    checked, ran = _both(tmp_path, monkeypatch, source, "TD504")
    assert checked == ran == {("TD504", "train.py", _row(source, "SAVE"))}


def test_train_loader_restarting_its_workers_is_reported_on_its_line_in_both(tmp_path, monkeypatch):
    source = textwrap.dedent(LOADERS)
    checked, ran = _both(tmp_path, monkeypatch, source, "TD103")
    train, test = ("TD103", "train.py", _row(source, "TRAIN")), ("TD103", "train.py", _row(source, "TEST"))
    assert checked == {train}  # the checker judges training loaders only
    # run measures both restarts against the same yardstick (the training loop's epoch): the
    # test loader's restarts cost as much as the train loader's, so both are reported
    assert ran == {train, test}
    report = json.loads(Path("run.json").read_text())
    (first,) = [f for f in report["findings"] if f["location"]["row"] == train[2]]
    assert "each of the 4 times it was iterated" in first["message"]
    assert first["evidence"]["respawns"] == 3
    assert 0.15 <= first["evidence"]["startup_s_per_epoch"] <= 1.0


def test_findings_in_imported_modules_are_named_relative_to_the_start_folder(tmp_path, monkeypatch):
    """JSON filenames: the script's and its imported modules' alike relative to the folder the
    run started in (an imported module used to be absolute, the script relative)."""
    (tmp_path / "utils").mkdir()
    (tmp_path / "utils" / "__init__.py").write_text("")
    (tmp_path / "utils" / "optim.py").write_text(
        "import torch\n\n\ndef make(model):\n    return torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=5e-4)\n"
    )
    source = textwrap.dedent(
        """
        import torch
        from torch import nn

        from utils.optim import make

        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        opt = make(model)
        for _ in range(4):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        """
    )
    _, ran = _both(tmp_path, monkeypatch, source, "TD204")
    assert ran == {("TD204", "utils/optim.py", 5)}


def test_dcgan_mistakes_are_placed_on_the_same_lines_in_both(tmp_path, monkeypatch):
    source = textwrap.dedent(DCGAN)
    checked, ran = _both(tmp_path, monkeypatch, source, "TD204,TD501")
    # weight decay on netD's BatchNorm and biases; the generator's weights saved alone
    assert checked == ran == {("TD204", "train.py", _row(source, "OPTD")), ("TD501", "train.py", _row(source, "SAVE"))}


def test_dcgan_biased_linear_before_batchnorm_is_on_the_models_line_in_both(tmp_path, monkeypatch):
    source = textwrap.dedent(DCGAN)
    monkeypatch.chdir(tmp_path)
    Path("train.py").write_text(source)
    assert run_main(["--select", "TD210", "--output-format", "json", "-o", "run.json", "train.py"]) == 0
    (finding,) = json.loads(Path("run.json").read_text())["findings"]
    assert (finding["filename"], (finding.get("location") or {}).get("row")) == ("train.py", _row(source, "NETD"))
