"""``keep_last``: rotation only after the new file is committed, under SIGKILL and on a full disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SRC = str(Path(__file__).resolve().parents[2] / "src")
KEEP = 3

#: Imports torch once, then forks writers that save ``last.pt`` (keep_last=3) in a loop, each
#: SIGKILLed at a random moment; after each kill the files are checked. Prints one JSON line.
KILL_LOOP = textwrap.dedent("""
    import json, os, random, signal, sys, time, warnings
    warnings.simplefilter("ignore")
    import torch
    torch.set_num_threads(1)
    from traindoctor import checkpoint

    folder, kills, keep = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    path = os.path.join(folder, "last.pt")
    rng = random.Random(1234)
    model = torch.nn.Linear(128, 128)
    # the first save imports what saving needs: done here once, not in every writer
    checkpoint.save(os.path.join(folder + "-warm", "warm.pt"), model=model)

    def on_disk():
        names = sorted(n for n in os.listdir(folder) if not n.startswith("."))
        return {n: torch.load(os.path.join(folder, n), weights_only=True)["step"] for n in names}

    def writer():
        steps = list(on_disk().values())
        step = max(steps, default=0)
        while True:
            step += 1
            checkpoint.save(path, model=model, step=step, keep_last=keep)

    states, shared = [], []
    for _ in range(kills):
        pid = os.fork()
        if pid == 0:
            try:
                writer()
            finally:
                os._exit(1)
        time.sleep(rng.uniform(0.0, 0.15))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        found = on_disk()
        states.append(found)
        by_inode = {}
        for name in found:
            by_inode.setdefault(os.stat(os.path.join(folder, name)).st_ino, []).append(name)
        shared.append([names for names in by_inode.values() if len(names) > 1])
    print(json.dumps({"states": states, "shared": shared}))
""")


def test_sigkill_at_random_moments_leaves_the_last_k_distinct_checkpoints(tmp_path: Path) -> None:
    script = tmp_path / "kill_loop.py"
    script.write_text(KILL_LOOP)
    folder = tmp_path / "ck"
    folder.mkdir()
    env = dict(os.environ, PYTHONPATH=SRC, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(script), str(folder), "40", str(KEEP)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    states = result["states"]
    assert len(states) == 40
    # the one name shared: a kill between linking last.pt as last.pt.1 and replacing last.pt
    assert all(groups in ([], [["last.pt", "last.pt.1"]]) for groups in result["shared"]), result["shared"]
    newest = 0
    for found in states:
        if not found:
            continue
        # every file loaded (complete); the distinct steps are consecutive: nothing lost
        steps = sorted(set(found.values()), reverse=True)
        assert steps == list(range(steps[0], steps[0] - len(steps), -1)), found
        assert found["last.pt"] == steps[0]
        assert steps[0] >= newest  # a kill never takes back a committed checkpoint
        newest = steps[0]
        if steps[0] >= KEEP:
            # the last K complete checkpoints; one older may wait for the next save's prune
            assert KEEP <= len(steps) <= KEEP + 1, found
    assert newest > 2 * KEEP  # the loop really saved through several rotations
    assert len({found.get("last.pt") for found in states}) > 10  # killed at many different moments


FULL_DISK = textwrap.dedent("""
    import os, resource, signal, sys, warnings
    warnings.simplefilter("ignore")
    import torch
    from traindoctor import checkpoint

    folder, mode = sys.argv[1], sys.argv[2]
    path = os.path.join(folder, "last.pt")
    model = torch.nn.Linear(16, 16)
    for step in (1, 2, 3):
        checkpoint.save(path, model=model, step=step, keep_last=3)
    if mode == "fsize":
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limit = os.path.getsize(path) * 4
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    for attempt in range(2):
        try:
            checkpoint.save(path, model=model, step=4, keep_last=3, extra={"big": torch.zeros(1 << 19)})
        except checkpoint.CheckpointWriteError as exc:
            print("ERROR", exc)
""")


def _mount_tmpfs(folder: Path) -> bool:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return False
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True)
    return done.returncode == 0


def test_a_full_disk_names_the_path_and_cause_and_keeps_the_previous_checkpoints(tmp_path: Path) -> None:
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = _mount_tmpfs(folder)
    try:
        script = tmp_path / "full.py"
        script.write_text(FULL_DISK)
        env = dict(os.environ, PYTHONPATH=SRC, OPENBLAS_NUM_THREADS="1")
        mode = "tmpfs" if mounted else "fsize"
        proc = subprocess.run(
            [sys.executable, str(script), str(folder), mode], capture_output=True, text=True, env=env, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        errors = [line for line in proc.stdout.splitlines() if line.startswith("ERROR")]
        cause = "the disk is full" if mounted else "larger than the file-size limit allows"
        assert len(errors) == 2, proc.stdout
        for line in errors:
            assert f"cannot write checkpoint {folder / 'last.pt'}: {cause}" in line
            assert "unexpected pos" not in line
        names = sorted(os.listdir(folder))
        assert names == ["last.pt", "last.pt.1", "last.pt.2"]  # no temporary left, nothing rotated
        steps = [torch.load(folder / n, weights_only=True)["step"] for n in names]
        assert steps == [3, 2, 1]
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=False)


def test_a_failed_write_rotates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from traindoctor import checkpoint
    from traindoctor.checkpoint import atomic

    model = torch.nn.Linear(2, 2)
    path = tmp_path / "last.pt"
    for step in (1, 2, 3):
        checkpoint.save(path, model=model, step=step, keep_last=3)

    def broken(obj: object, fh: object) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(atomic, "_serialize", broken)
    for _ in range(3):
        with pytest.raises(checkpoint.CheckpointWriteError, match=r"cannot write checkpoint .*last\.pt: Input/output"):
            checkpoint.save(path, model=model, step=4, keep_last=3)
    monkeypatch.undo()
    steps = [torch.load(tmp_path / n, weights_only=True)["step"] for n in sorted(os.listdir(tmp_path))]
    assert steps == [3, 2, 1]
    checkpoint.save(path, model=model, step=4, keep_last=3)
    steps = [torch.load(tmp_path / n, weights_only=True)["step"] for n in sorted(os.listdir(tmp_path))]
    assert steps == [4, 3, 2]


def test_two_saves_killed_before_their_prune_leave_one_checkpoint_too_many_at_most(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A kill after a save's commit and before its prune leaves K+1 checkpoints; a second such
    # kill in the next save must not leave K+2 (the sigkill test saw 5 with keep_last=3 once)
    from traindoctor import checkpoint
    from traindoctor.checkpoint import atomic

    model = torch.nn.Linear(2, 2)
    path = tmp_path / "last.pt"
    for step in (1, 2, 3):
        checkpoint.save(path, model=model, step=step, keep_last=3)

    def killed(folder: object) -> None:  # the commit is done; the process dies before its prune
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic, "fsync_dir", killed)
    for step in (4, 5):
        with pytest.raises(KeyboardInterrupt):
            checkpoint.save(path, model=model, step=step, keep_last=3)
        steps = sorted(torch.load(tmp_path / n, weights_only=True)["step"] for n in os.listdir(tmp_path))
        assert steps == list(range(step - 3, step + 1)), steps  # K+1 at most, nothing lost
    monkeypatch.undo()
    checkpoint.save(path, model=model, step=6, keep_last=3)
    assert sorted(torch.load(tmp_path / n, weights_only=True)["step"] for n in os.listdir(tmp_path)) == [4, 5, 6]
