"""A user's project for the sandbox tests, and a snapshot of it that notices any change."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).parent / "scripts" / "writes.py"
CHECKPOINT = b"the user's step-40 checkpoint"


def shm_name(folder: Path) -> str:
    """The user's file in ``/dev/shm`` that goes with the project ``folder``."""
    return f"/dev/shm/traindoctor-test-{hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]}"


def make_project(folder: Path, cases: Sequence[str]) -> Path:
    """The user's folder: ``data/train.bin`` (the training data), ``ckpt/last.pt`` (a step-40
    checkpoint), ``case.json`` (what ``writes.py`` tries), and for each case a sub-folder of
    that name with notes, a log, an empty folder, a checkpoint, data, a database and a hidden
    folder, and a file of the user's in ``/dev/shm`` (:func:`shm_name` of the sub-folder, which
    the caller removes)."""
    folder.mkdir(parents=True)
    _files(folder)
    shm = {}
    for case in cases:
        _files(folder / case)
        shm[case] = shm_name(folder / case)
        Path(shm[case]).write_text("the user's shared memory")
    (folder / "case.json").write_text(json.dumps({"cases": shm, "user": str(folder.resolve())}))
    return folder


def _files(folder: Path) -> None:
    folder.mkdir(exist_ok=True)
    (folder / "notes.txt").write_text("user notes")
    (folder / "logs").mkdir()
    (folder / "logs" / "run.log").write_text("log line\n")
    (folder / "empty").mkdir()
    (folder / "ckpt").mkdir()
    (folder / "ckpt" / "last.pt").write_bytes(CHECKPOINT)
    (folder / "data").mkdir()
    (np.arange(64, dtype=np.float32) * np.float32(0.001)).tofile(folder / "data" / "train.bin")
    db = sqlite3.connect(folder / "runs.db")
    db.execute("create table runs (name text)")
    db.execute("insert into runs values ('user')")
    db.commit()
    db.close()
    (folder / ".cache").mkdir()
    (folder / ".cache" / "state.txt").write_text("state")


def remove_shm(folder: Path) -> None:
    """Remove the ``/dev/shm`` files of the project ``folder`` (:func:`make_project`)."""
    for sub in (folder, *folder.iterdir()):
        for path in glob.glob(glob.escape(shm_name(sub)) + "*"):
            os.remove(path)


def snapshot(folder: Path) -> dict[str, tuple[object, ...]]:
    """Every entry's kind, mode, modification time and content hash (or link target), and the
    user's ``/dev/shm`` files of ``folder`` and its sub-folders (:func:`shm_name`, and any file
    whose name starts with it)."""
    st = os.lstat(folder)
    out: dict[str, tuple[object, ...]] = {".": (st.st_mode, st.st_mtime_ns, st.st_size, None)}
    for sub in (folder, *folder.iterdir()):
        for path in sorted(glob.glob(glob.escape(shm_name(sub)) + "*")):
            st = os.lstat(path)
            out[path] = (st.st_mode, st.st_mtime_ns, st.st_size, hashlib.sha256(Path(path).read_bytes()).hexdigest())
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            if os.path.islink(path):
                content: object = os.readlink(path)
            elif os.path.isfile(path):
                content = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            else:
                content = None
            out[os.path.relpath(path, folder)] = (st.st_mode, st.st_mtime_ns, st.st_size, content)
    return out


def outcomes(log: str) -> dict[str, str]:
    """``OUTCOME <case> ok|refused|broken ...`` lines of the script's output -> case: word."""
    found = {}
    for line in log.splitlines():
        if line.startswith("OUTCOME "):
            _, case, word = line.split(" ", 3)[:3]
            found[case] = word
    return found
