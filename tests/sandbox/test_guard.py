"""The guard alone (what ``--allow-writes`` leaves where no sandbox works): Python's writes,
renames and removals in a view land in the view, and the user's files stay as they were."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from traindoctor.sandbox import NONE, Sandbox, build

SRC = Path(__file__).resolve().parents[2] / "src"

CHILD = """
import os, pathlib, shutil, tempfile
from traindoctor.sandbox.guard import install_from_env
assert install_from_env() is not None
import torch
open("new.txt", "w").write("trial")
assert open("new.txt").read() == "trial"            # reads see the trial's own write
assert open("keep.txt").read() == "user data"        # other reads are untouched
pathlib.Path("keep.txt").write_text("overwritten")  # pathlib goes through io.open
torch.save({"w": 1}, "ckpt.pt")
assert torch.load("ckpt.pt")["w"] == 1
torch.save({"w": 2}, "ckpt.tmp")
os.replace("ckpt.tmp", "ckpt.pt")                    # the atomic-save pattern
os.remove("old.log")
os.makedirs("runs/exp1", exist_ok=True)
shutil.rmtree("data")
assert tempfile.gettempdir().startswith(os.environ["TRAINDOCTOR_SANDBOX_WRITABLE"])
print("ok")
"""


def test_python_writes_renames_and_removals_land_in_the_view(tmp_path: Path) -> None:
    user = tmp_path / "user"
    (user / "data").mkdir(parents=True)
    (user / "data" / "x.bin").write_bytes(b"x")
    (user / "keep.txt").write_text("user data")
    (user / "ckpt.pt").write_bytes(b"original checkpoint")
    (user / "old.log").write_text("log")
    before = {p.relative_to(user): p.read_bytes() for p in user.rglob("*") if p.is_file()}
    scratch = tmp_path / "scratch"
    view = build(str(user), str(scratch / "view"))
    box = Sandbox(NONE, (str(scratch.resolve()),))
    env = box.env({**os.environ, "PYTHONPATH": str(SRC)})
    done = subprocess.run(
        box.command([sys.executable, "-c", textwrap.dedent(CHILD)], view.root),
        cwd=view.root,
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
    root = Path(view.root)
    assert (root / "keep.txt").read_text() == "overwritten" and not (root / "keep.txt").is_symlink()
    assert (root / "runs" / "exp1").is_dir() and not (root / "data").exists() and not (root / "old.log").exists()
    assert torch_value(root / "ckpt.pt") == 2


def torch_value(path: Path) -> int:
    """The ``w`` of a checkpoint the child saved."""
    import torch

    return int(torch.load(path)["w"])
