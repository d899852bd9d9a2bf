"""A training script that first tries writes to the user's files, then trains on ``data/train.bin``
(read through a read-only memmap) and saves its checkpoint to ``--ckpt`` every 5 steps (and after
step 1).

``case.json`` names the cases (each a kind of write) and, for each, the user's file in
``/dev/shm``; each case runs in its own sub-folder of the user's folder, named after it. Each write
prints ``OUTCOME <case> ok`` (it happened, in the trial's view), ``OUTCOME <case> refused``
(the operating system or the sandbox refused it), or ``OUTCOME <case> broken <error>`` (anything else).
Usable by ``traindoctor tune`` (a DataLoader training loop) and ``verify-resume`` (``--resume``
loads ``--ckpt`` before any write and skips the batches already seen)."""

import argparse
import errno
import io
import json
import os
import shutil
import sqlite3
import subprocess

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

CASE = json.load(open("case.json"))
USER = ""  # the case's folder in the user's tree, named absolutely
SHM = ""  # the case's file of the user's in /dev/shm


class Refused(Exception):
    """A step of a case that the sandbox must refuse did not fail."""


def _refused(action) -> None:
    try:
        action()
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES, errno.EROFS, errno.EXDEV):
            raise Refused from exc
        raise


def rename() -> None:
    os.rename("notes.txt", "notes.old")
    assert open("notes.old").read() == "user notes" and not os.path.exists("notes.txt")


def replace() -> None:
    os.replace("ckpt/last.pt", "ckpt/old.pt")  # the checkpoint rotation of the issue
    assert open("ckpt/old.pt", "rb").read() == b"the user's step-40 checkpoint"


def move() -> None:
    os.makedirs("archive", exist_ok=True)
    shutil.move("ckpt/last.pt", "archive/last.pt")
    shutil.move("logs", "archive/logs")
    assert open("archive/logs/run.log").read() == "log line\n"


def remove() -> None:
    os.remove("notes.txt")
    shutil.rmtree("logs")
    os.rmdir("empty")
    assert not os.path.exists("notes.txt") and not os.path.exists("logs")


def truncate() -> None:
    os.truncate("logs/run.log", 3)
    assert open("logs/run.log").read() == "log"


def fileio() -> None:
    with io.FileIO("notes.txt", "w") as fh:
        fh.write(b"trial notes")
    assert open("notes.txt").read() == "trial notes"


def os_open() -> None:
    fd = os.open("notes.txt", os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"trial")
    os.close(fd)
    assert open("notes.txt").read() == "trial"


def os_open_dir_fd() -> None:
    folder = os.open("logs", os.O_RDONLY)
    try:
        _refused(lambda: os.close(os.open("run.log", os.O_WRONLY | os.O_APPEND, dir_fd=folder)))
    finally:
        os.close(folder)


def chmod() -> None:
    os.chmod("notes.txt", 0o600)
    assert os.stat("notes.txt").st_mode & 0o777 == 0o600
    shutil.copy2("logs/run.log", "run-copy.log")  # copystat: chmod and utime of the trial's own file


def chmod_user() -> None:
    _refused(lambda: os.chmod(os.path.join(USER, "notes.txt"), 0o600))


def chmod_descriptor() -> None:
    fd = os.open(os.path.join(USER, "notes.txt"), os.O_RDONLY)
    try:
        _refused(lambda: os.fchmod(fd, 0o600))
    finally:
        os.close(fd)


def symlink() -> None:
    os.symlink(os.path.join(USER, "notes.txt"), "my-link")
    with open("my-link", "w") as fh:
        fh.write("through my link")
    assert open("my-link").read() == "through my link"


def hardlink() -> None:
    _refused(lambda: os.link(os.path.join(USER, "notes.txt"), "hard.txt"))  # then a write would reach it


def subprocess_sh() -> None:
    subprocess.run(["sh", "-c", "echo new > sh-new.txt"], check=True)
    assert open("sh-new.txt").read() == "new\n"
    done = subprocess.run(["sh", "-c", "echo changed > notes.txt"], capture_output=True)
    assert done.returncode != 0 and open("notes.txt").read() == "user notes", done


def subprocess_rm() -> None:
    subprocess.run(["rm", "-rf", "notes.txt", "logs", "ckpt"], check=True)
    assert not os.path.exists("notes.txt") and not os.path.exists("ckpt")


def subprocess_touch() -> None:
    subprocess.run(["touch", "touched.txt"], check=True)
    done = subprocess.run(["touch", "notes.txt"], capture_output=True)
    assert done.returncode != 0, done


def dev_shm() -> None:
    with open(SHM, "w") as fh:  # a file of that name exists in the machine's /dev/shm
        fh.write("trial")
    assert open(SHM).read() == "trial"


def sqlite() -> None:
    db = sqlite3.connect("runs.db")
    db.execute("insert into runs values ('trial')")
    db.commit()
    assert [r[0] for r in db.execute("select name from runs")] == ["user", "trial"]
    db.close()


def r_plus() -> None:
    with open("data/train.bin", "r+b") as fh:
        head = fh.read(8)
        fh.seek(0)
        fh.write(b"trial")
    assert head == np.float32([0, 0.001]).tobytes() and open("data/train.bin", "rb").read(5) == b"trial"


def memmap() -> None:
    values = np.memmap("data/train.bin", dtype=np.float32, mode="r+")
    values[1] = 7.0
    values.flush()
    assert np.fromfile("data/train.bin", dtype=np.float32)[1] == 7.0


def absolute() -> None:
    _refused(lambda: open(os.path.join(USER, "notes.txt"), "w"))


def hidden() -> None:
    with open(".cache/state.txt", "a") as fh:
        fh.write(" and the trial's")
    open(".cache/new.txt", "w").write("new")
    assert open(".cache/state.txt").read() == "state and the trial's"


def argument() -> None:
    """Nothing here: the training loop saves to the ``--ckpt`` argument."""


NAMES = (
    "rename",
    "replace",
    "move",
    "remove",
    "truncate",
    "fileio",
    "os_open",
    "os_open_dir_fd",
    "chmod",
    "chmod_user",
    "chmod_descriptor",
    "symlink",
    "hardlink",
    "subprocess_sh",
    "subprocess_rm",
    "subprocess_touch",
    "dev_shm",
    "sqlite",
    "r_plus",
    "memmap",
    "absolute",
    "hidden",
    "argument",
)
CASES = {name: globals()[name] for name in NAMES}


def try_writes(cases: dict[str, str]) -> None:
    """Each case in its folder, with its ``/dev/shm`` file."""
    global USER, SHM
    for name, shm in cases.items():
        if name == "argument":
            continue
        USER, SHM = os.path.join(CASE["user"], name), shm
        start = os.getcwd()
        try:
            os.chdir(name)
            CASES[name]()
        except Refused:
            print(f"OUTCOME {name} refused", flush=True)
        except Exception as exc:  # reported; the training still runs
            print(f"OUTCOME {name} broken {type(exc).__name__}: {exc}", flush=True)
        else:
            print(f"OUTCOME {name} ok", flush=True)
        finally:
            os.chdir(start)


class Series(Dataset):
    """Rows of 4 values of ``data/train.bin``, read through a read-only memmap."""

    def __init__(self) -> None:
        self.values = np.memmap("data/train.bin", dtype=np.float32, mode="r").reshape(-1, 4)

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(np.array(self.values[i]))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt", default="ckpt/last.pt")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    if args.resume:
        state = torch.load(args.ckpt)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    try_writes(CASE["cases"])
    loader = DataLoader(Series(), batch_size=4)
    skip = step % len(loader)
    while step < args.steps:
        for index, x in enumerate(loader):
            if skip:
                skip -= 1
                continue
            loss = model(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            if step == 1 or step % 5 == 0:
                folder = os.path.dirname(args.ckpt)
                if folder:
                    os.makedirs(folder, exist_ok=True)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, args.ckpt)
            if step >= args.steps:
                break


if __name__ == "__main__":
    main()
