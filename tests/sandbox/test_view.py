"""The view of the user's folder: what it links, copies and skips, and how file arguments are
redirected into it (never rewritten to name the user's own file)."""

from __future__ import annotations

import os
from pathlib import Path

from traindoctor.sandbox.view import build


def _user(tmp_path: Path) -> Path:
    user = tmp_path / "user"
    (user / "ckpt").mkdir(parents=True)
    (user / "ckpt" / "last.pt").write_bytes(b"ckpt")
    (user / "train.py").write_text("print('train')\n")
    (user / ".git").mkdir()
    (user / "runs").mkdir()
    (tmp_path / "elsewhere.bin").write_bytes(b"x")
    return user


def test_the_view_links_files_copies_sources_and_skips_its_own_folder(tmp_path: Path) -> None:
    user = _user(tmp_path)
    view = build(str(user), str(user / "runs" / "view"), skip=(str(user / "runs"),))
    root = Path(view.root)
    assert (root / "ckpt").is_dir() and not (root / "ckpt").is_symlink()
    assert os.readlink(root / "ckpt" / "last.pt") == str((user / "ckpt" / "last.pt").resolve())
    assert (root / "train.py").is_file() and not (root / "train.py").is_symlink()  # __file__ stays in the view
    assert (root / ".git").is_symlink()  # hidden folders are linked whole
    assert not (root / "runs").exists()  # the runs' own folder is not mirrored into itself
    assert view.to_user(str(root / "train.py")) == str(user.resolve() / "train.py")


def test_file_arguments_name_the_view_and_never_the_users_file(tmp_path: Path) -> None:
    user = _user(tmp_path)
    view = build(str(user), str(tmp_path / "view"))
    cwd = str(user)
    inside = str(user / "ckpt" / "last.pt")
    outside = str(tmp_path / "elsewhere.bin")
    args = [
        "--ckpt",
        "ckpt/last.pt",  # relative: stays relative, the run starts in the view
        inside,  # absolute inside the folder: the view's copy
        f"--resume={inside}",
        f"trainer.ckpt_path={inside}",  # Hydra's key=value
        "../elsewhere.bin",  # outside the folder: absolute, readable only
        "missing.pt",  # not an existing path: unchanged
        "--lr=0.1",
    ]
    mapped = str(tmp_path / "view" / "ckpt" / "last.pt")
    assert view.redirect_args(args, cwd) == [
        "--ckpt",
        "ckpt/last.pt",
        mapped,
        f"--resume={mapped}",
        f"trainer.ckpt_path={mapped}",
        outside,
        "missing.pt",
        "--lr=0.1",
    ]


def test_ancestors_are_mirrored_so_paths_above_the_folder_read_the_users_files(tmp_path: Path) -> None:
    # PyTorch-GAN's shape: implementations/cyclegan/cyclegan.py reads ../../data/NAME;
    # pytorch/examples' vae/main.py reads ../data.
    repo = tmp_path / "repo"
    user = repo / "implementations" / "cyclegan"
    user.mkdir(parents=True)
    (user / "cyclegan.py").write_text("print('train')\n")
    (repo / "implementations" / "models.py").write_text("X = 1\n")
    (repo / "data" / "fake" / "train").mkdir(parents=True)
    (repo / "data" / "fake" / "train" / "0.jpg").write_bytes(b"jpg")
    scratch = tmp_path / "scratch"
    view = build(str(user), str(scratch / "reference-cwd"), skip=(str(scratch),), parents=3)
    root = Path(view.root)
    assert root.name == "cyclegan" and (root / "cyclegan.py").is_file()
    image = root / ".." / ".." / "data" / "fake" / "train" / "0.jpg"
    assert image.read_bytes() == b"jpg"
    assert os.path.realpath(root / ".." / ".." / "data") == str((repo / "data").resolve())
    assert (root / ".." / "models.py").read_text() == "X = 1\n"
    # the folder itself is the view, never a link to the user's folder
    assert not (root.parent / "cyclegan").is_symlink()
    # the scratch folder (a sibling of an ancestor here) is never linked into itself
    assert not any(p.name == "scratch" for p in (scratch / "reference-cwd").rglob("scratch"))
    # a location reported from a mirrored ancestor names the user's file
    assert view.to_user(str(root.parent / "models.py")) == str((repo / "implementations" / "models.py").resolve())
    assert view.to_user(str(root / "cyclegan.py")) == str(user.resolve() / "cyclegan.py")


def test_without_parents_the_view_is_the_given_folder_and_nothing_above_is_linked(tmp_path: Path) -> None:
    user = tmp_path / "a" / "b"
    user.mkdir(parents=True)
    (tmp_path / "a" / "data").mkdir()
    view = build(str(user), str(tmp_path / "v" / "view"))
    assert view.root == str((tmp_path / "v" / "view").resolve()) and view.outer is None
    assert not (tmp_path / "v" / "data").exists()
