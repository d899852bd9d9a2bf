"""verify-resume runs where the user runs (issue 9): a nanoGPT-style script that reads
``configurator.py`` and ``data/train.bin`` by relative paths works, and the runs never change the
user's files (an ``out/ckpt.pt`` from an earlier run stays as it was)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np

from traindoctor.resume.cli import main
from traindoctor.sandbox.view import build

SCRIPT = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import torch

    out_dir = "out"
    lr = 0.0
    init_from = "scratch"
    exec(open("configurator.py").read())  # nanoGPT: reads ./configurator.py, sets lr
    for arg in sys.argv[1:]:
        if arg == "--resume":
            init_from = "resume"
    data = np.memmap(os.path.join("data", "train.bin"), dtype=np.float32, mode="r")
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    step = 0
    if init_from == "resume":
        ckpt = torch.load(os.path.join(out_dir, "ckpt.pt"))
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        step = ckpt["iter_num"]
    while step < 10:
        i = (step * 4) % 32
        x = torch.from_numpy(np.array(data[i * 4:(i + 4) * 4])).view(4, 4)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        step += 1
        if step % 2 == 0:
            os.makedirs(out_dir, exist_ok=True)
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "iter_num": step}, os.path.join(out_dir, "ckpt.pt"))
    """
)


def _project(tmp_path: Path) -> Path:
    project = tmp_path / "nanogpt"
    (project / "data").mkdir(parents=True)
    (project / "out").mkdir()
    (project / "train.py").write_text(SCRIPT)
    (project / "configurator.py").write_text("lr = 0.01\n")
    np.arange(32 * 16, dtype=np.float32).__mul__(0.001).tofile(project / "data" / "train.bin")
    (project / "out" / "ckpt.pt").write_bytes(b"an older run's checkpoint")
    return project


def test_relative_paths_work_and_user_files_stay_untouched(tmp_path: Path, monkeypatch, capsys) -> None:
    project = _project(tmp_path)
    before = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    monkeypatch.chdir(project)
    code = main(
        ["train.py", "--resume-args", "--resume", "--steps", "8", "--interrupt-at", "3", "--output-format", "json"]
    )
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result
    assert result["exact"] is True and result["checkpoint_step"] == 4
    after = {p: p.read_bytes() for p in project.rglob("*") if p.is_file()}
    assert after == before  # nothing written, nothing changed in the user's folder


def test_failure_says_where_the_runs_started(tmp_path: Path, monkeypatch, capsys) -> None:
    project = _project(tmp_path)
    (project / "configurator.py").unlink()
    monkeypatch.chdir(project)
    assert main(["train.py", "--resume-args", "--resume", "--steps", "4"]) == 2
    err = capsys.readouterr().err
    assert "configurator.py" in err  # the script's own error, from its output
    assert f"the runs started in a mirror of {project}" in err


def test_mirror_links_files_and_copies_folders(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "data" / "sub").mkdir(parents=True)
    (src / "data" / "sub" / "a.bin").write_bytes(b"x")
    (src / ".git").mkdir()
    dst = tmp_path / "dst"
    build(str(src), str(dst))
    assert (dst / "data").is_dir() and not (dst / "data").is_symlink()
    assert (dst / "data" / "sub" / "a.bin").is_symlink()
    assert (dst / ".git").is_symlink()  # hidden folders are linked whole
    assert (dst / "data" / "sub" / "a.bin").read_bytes() == b"x"


GAN_SHAPED = textwrap.dedent(
    """
    # PyTorch-GAN's shape: run from implementations/NAME, data at ../../data/DATASET,
    # per-epoch weights saved as saved_models/G_%d.pth, resumed with --epoch N.
    import argparse, os
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset

    parser = argparse.ArgumentParser()
    parser.add_argument("--epoch", type=int, default=0)
    parser.add_argument("--n_epochs", type=int, default=4)
    opt = parser.parse_args()

    class Folder(Dataset):
        def __init__(self, root):
            self.files = sorted(os.path.join(root, f) for f in os.listdir(root))
        def __len__(self):
            return len(self.files)
        def __getitem__(self, i):
            return torch.from_numpy(np.fromfile(self.files[i], dtype=np.float32))

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    os.makedirs("saved_models", exist_ok=True)
    if opt.epoch != 0:
        ckpt = torch.load("saved_models/G_%d.pth" % opt.epoch)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
    loader = DataLoader(Folder("../../data/fake"), batch_size=2, shuffle=False)
    for epoch in range(opt.epoch, opt.n_epochs):
        for x in loader:
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                   "saved_models/G_%d.pth" % (epoch + 1))
    """
)


def test_data_read_above_the_folder_through_dot_dot_is_found(tmp_path: Path, monkeypatch, capsys) -> None:
    repo = tmp_path / "PyTorch-GAN"
    user = repo / "implementations" / "gan"
    user.mkdir(parents=True)
    (user / "gan.py").write_text(GAN_SHAPED)
    data = repo / "data" / "fake"
    data.mkdir(parents=True)
    for i in range(8):
        (np.arange(4, dtype=np.float32) * 0.1 * (i + 1)).tofile(data / f"{i}.bin")
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    monkeypatch.chdir(user)
    code = main(
        ["gan.py", "--resume-args", "--epoch 2", "--steps", "16", "--interrupt-at", "8", "--output-format", "json"]
    )
    result = json.loads(capsys.readouterr().out)
    assert code == 0, result  # before: the runs saw an empty ../../data and stopped at 0 steps
    assert result["exact"] is True and result["checkpoint_step"] == 8
    after = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    assert after == before
