"""The trial sandbox redirects the script's writes; checked in a child (install() is for good)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

CHILD = """
import json, os, pathlib, shutil, sys
from traindoctor.tune.sandbox import Sandbox
Sandbox(sys.argv[1]).install()
import torch
open("new.txt", "w").write("trial")
assert open("new.txt").read() == "trial"            # reads see the trial's own write
assert open("keep.txt").read() == "user data"        # other reads are untouched
pathlib.Path("keep.txt").write_text("overwritten")  # pathlib goes through io.open
torch.save({"w": 1}, "ckpt.pt")
assert torch.load("ckpt.pt")["w"] == 1
torch.save({"w": 2}, "ckpt.tmp")
os.replace("ckpt.tmp", "ckpt.pt")                    # the atomic-save pattern
os.remove("old.log")                                 # deleting the user's file: a no-op
os.makedirs("runs/exp1", exist_ok=True)
shutil.rmtree("data")
import tempfile
assert tempfile.gettempdir().startswith(sys.argv[1])
print("ok")
"""


def test_writes_renames_and_deletes_never_reach_the_users_files(tmp_path: Path) -> None:
    user = tmp_path / "user"
    (user / "data").mkdir(parents=True)
    (user / "data" / "x.bin").write_bytes(b"x")
    (user / "keep.txt").write_text("user data")
    (user / "ckpt.pt").write_bytes(b"original checkpoint")
    (user / "old.log").write_text("log")
    before = {p.relative_to(user): p.read_bytes() for p in user.rglob("*") if p.is_file()}
    scratch = tmp_path / "scratch"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(scratch)],
        cwd=user,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
    after = {p.relative_to(user): p.read_bytes() for p in user.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in user.iterdir()) == ["ckpt.pt", "data", "keep.txt", "old.log"]
    mirrored = scratch / "redirected" / str(user).lstrip("/")
    assert (mirrored / "keep.txt").read_text() == "overwritten"
    assert (mirrored / "runs" / "exp1").is_dir()
