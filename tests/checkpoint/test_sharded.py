"""Sharded checkpoints under torchrun (2 CPU ranks, gloo): FSDP2 and DDP resume bit-identically.

Each scenario is a chain of real torchrun launches of ``dist/train_sharded.py``:
uninterrupted run; run that saves mid-epoch at step 5 and is SIGKILLed (one rank) inside the
save at step 9; resume from what is on disk; and for FSDP2 a resume of the 2-rank checkpoint on
1 rank.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

from traindoctor import checkpoint
from traindoctor.checkpoint.data import ResumableLoader

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).parent / "dist" / "train_sharded.py"


def torchrun(out: Path, *args: str, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node",
            str(nproc),
            str(SCRIPT),
            "--out",
            str(out),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=out,
    )


def result(out: Path, rank: int = 0) -> dict:
    return torch.load(out / f"result_rank{rank}.pt", weights_only=True)


def assert_same_state(a: dict, b: dict) -> None:
    flat_a, flat_b = _flatten(a), _flatten(b)
    assert flat_a.keys() == flat_b.keys()
    for key, value in flat_a.items():
        other = flat_b[key]
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, other), key
        else:
            assert value == other, key


def _flatten(value, prefix=""):
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}"))
        return out
    if isinstance(value, (list, tuple)):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def crash_and_resume(tmp_path: Path, kind: str, *extra: str) -> tuple[Path, Path]:
    full, crashed = tmp_path / "full", tmp_path / "crashed"
    proc = torchrun(full, "--kind", kind)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = torchrun(crashed, "--kind", kind, "--save-at", "5,9", "--kill-in-save-at", "9", *extra)
    assert proc.returncode != 0 and "SIGKILL" in proc.stderr, proc.stderr[-3000:]
    ckpt = crashed / "ckpt" / "last"
    # The save at step 9 died half-way: its temporary folder is left, the step-5 one is intact.
    manifest = json.loads((ckpt / "traindoctor.json").read_text())
    assert manifest["step"] == 5 and manifest["world_size"] == 2
    assert sorted(p.name for p in ckpt.iterdir()) == [
        ".metadata",
        "__0_0.distcp",
        "__1_0.distcp",
        "rank_0.pt",
        "rank_1.pt",
        "train_state.pt",
        "traindoctor.json",
    ]
    leftovers = [p.name for p in ckpt.parent.iterdir() if p.name != "last"]
    assert len(leftovers) == 1 and leftovers[0].startswith(".last.tmp-")
    resumed = tmp_path / "resumed"
    proc = torchrun(resumed, "--kind", kind, "--resume", str(ckpt))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        a, b = result(full, rank), result(resumed, rank)
        assert b["resumed_from"] == 5 and b["missing"] == []
        assert {"model", "optimizer", "scheduler", "loader", "rng:torch"} <= set(b["restored"])
        assert b["steps"] == list(range(6, 13))
        assert b["seen"] == a["seen"][5:]  # the rest of the interrupted epoch, in order
        assert b["losses"] == a["losses"][5:]  # bit-identical, step by step
    assert_same_state(result(full)["final"], result(resumed)["final"])
    return crashed, full


def test_fsdp2_resumes_bit_identically_after_a_kill_and_reshards_to_one_rank(tmp_path):
    crashed, full = crash_and_resume(tmp_path, "fsdp")
    # 2 ranks -> 1 rank: DCP reshards the weights and Adam moments; the loader deals out the
    # rest of the interrupted epoch to the single rank.
    one = tmp_path / "one_rank"
    proc = torchrun(one, "--kind", "fsdp", "--resume", str(crashed / "ckpt" / "last"), "--check-errors", nproc=1)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = result(one)
    assert res["world"] == 1 and res["resumed_from"] == 5
    assert_same_state(result(crashed)["at_save_5"], res["after_load"])
    seen_before = [i for r in (0, 1) for i in result(crashed, r)["seen"][4]]  # step 5 = epoch 1
    seen_after = [i for batch in res["seen"][:6] for i in batch]  # 24 samples left, batch 4
    assert sorted(seen_before + seen_after) == list(range(32))
    assert res["steps"][6] == 12 and res["seen"][6] != res["seen"][0]  # epoch 2 began
    assert "restored" in res and "loader" in res["restored"] and "rng:torch" in res["restored"]
    assert "without a process group" not in res["save_error"]
    assert (
        "model (FSDPSequential): parameter '0.weight' is a DTensor but torch.distributed "
        "has no process group" in res["save_error"]
    )
    assert not (one / "late").exists()


def test_ddp_async_save_resumes_bit_identically_after_a_kill(tmp_path):
    crashed, _ = crash_and_resume(tmp_path, "ddp", "--async")
    manifest = json.loads((crashed / "ckpt" / "last" / "traindoctor.json").read_text())
    assert manifest["async"] is True and manifest["model_class"] == "DistributedDataParallel"


def _loaders(world: int, consumed: int = 0) -> list[ResumableLoader]:
    loaders = []
    for rank in range(world):
        loader = ResumableLoader(list(range(30)), batch_size=2, shuffle=True, seed=3)
        loader.sampler.num_replicas, loader.sampler.rank = world, rank
        loaders.append(loader)
    return loaders


@pytest.mark.parametrize("new_world", [1, 2, 3])
def test_loader_position_moves_to_another_world_size(new_world):
    old = _loaders(2)
    seen = []
    for loader in old:
        it = iter(loader)
        for _ in range(4):
            seen += next(it).tolist()
    states = [loader.state_dict() for loader in old]
    assert states[0]["global_samples_done"] == 16 and states[0]["world_size"] == 2
    new = _loaders(new_world)
    rest = []
    for loader in new:
        loader.load_state_dict(states[0])
        rest += [i for batch in loader for i in batch.tolist()]
    share = -(-14 // new_world)
    assert len(rest) == share * new_world  # padded to equal shares, like DistributedSampler
    # Every sample the interrupted epoch had not seen comes once; only the padding repeats.
    assert sorted(set(rest) - set(seen)) == sorted(set(range(30)) - set(seen))
    assert len(rest) - len(set(rest) - set(seen)) == share * new_world - 14
    if new_world == 2:  # same world size: exactly what the old ranks would have yielded
        expected = []
        for loader in old:
            expected += [i for batch in loader for i in batch.tolist()]
        assert rest == expected
    assert all(loader.epoch == 1 for loader in new)


def test_plain_models_keep_the_single_file_path_and_async_needs_a_sharded_model(tmp_path):
    from traindoctor.checkpoint.sharded import ShardedStateError, wants_sharded

    model = torch.nn.Linear(2, 2)
    assert wants_sharded(model) is False
    assert wants_sharded({"a": model, "b": model}) is False
    checkpoint.save(tmp_path / "plain.pt", model=model)
    with pytest.raises(ValueError, match="async_save=True is for sharded models"):
        checkpoint.save(tmp_path / "x.pt", model=model, async_save=True)
    assert ShardedStateError.__mro__[1] is ValueError


def _fake_tmp(parent: Path, name: str, step: int) -> Path:
    tmp = parent / f".{name}.tmp-1-{step}"
    tmp.mkdir(parents=True)
    (tmp / "rank_0.pt").write_text(str(step))
    return tmp


def test_commit_renames_into_place_and_keep_last_rotates_directories(tmp_path):
    from traindoctor.checkpoint.sharded import MANIFEST, _commit, resolve

    for step in (1, 2, 3):
        _commit(_fake_tmp(tmp_path, "last", step), tmp_path / "last", {"step": step}, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last", "last.1", "last.2"]
    assert [json.loads((tmp_path / n / MANIFEST).read_text())["step"] for n in ("last", "last.1", "last.2")] == [
        3,
        2,
        1,
    ]
    for step in (10, 20, 30):
        dest = tmp_path / "run" / f"step_{step:06d}"
        dest.parent.mkdir(exist_ok=True)
        _commit(_fake_tmp(dest.parent, dest.name, step), dest, {"step": step}, 2)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["step_000020", "step_000030"]
    # A crash between "move the old one aside" and "rename the new one in": load finds the old.
    plain = tmp_path / "plain"
    _commit(_fake_tmp(tmp_path, "plain", 1), plain, {"step": 1}, None)
    aside = tmp_path / ".plain.old-dead"
    plain.rename(aside)
    with pytest.warns(UserWarning, match="interrupted between its two renames"):
        assert resolve(plain) == aside


def test_a_position_that_cannot_move_to_another_world_size_is_named(tmp_path):
    from torch.utils.data import DistributedSampler

    from traindoctor.checkpoint.sharded import _load_resharded_position

    data = TensorDataset(torch.arange(8.0))
    sampler = DistributedSampler(data, num_replicas=1, rank=0)
    plain = {"kind": "DistributedSampler", "position_known": False, "epoch": 3}
    for rank in (0, 1):
        torch.save({"sampler": plain}, tmp_path / f"rank_{rank}.pt")
    message = _load_resharded_position(tmp_path, "sampler", sampler, 2, 1)
    assert message.startswith("sampler (DistributedSampler): its position cannot be moved from 2 to 1 rank(s)")
    assert sampler.epoch == 3  # the epoch still carries over
    loader = ResumableLoader(data, batch_size=2)
    for rank, done in ((0, 4), (1, 6)):
        torch.save(
            {
                "loader": {
                    "kind": "ResumableLoader",
                    "epoch": 0,
                    "global_samples_done": done,
                    "world_size": 2,
                    "samples_done": done // 2,
                    "seed": 0,
                    "batch_size": 2,
                }
            },
            tmp_path / f"rank_{rank}.pt",
        )
    message = _load_resharded_position(tmp_path, "loader", loader, 2, 1)
    assert "the 2 ranks were at different positions" in message


def test_a_rotating_commit_killed_before_its_last_rename_loses_no_directory(tmp_path, monkeypatch):
    from traindoctor.checkpoint import sharded
    from traindoctor.checkpoint.sharded import MANIFEST, _commit, resolve

    def steps() -> dict[str, int]:
        return {p.name: json.loads((p / MANIFEST).read_text())["step"] for p in sorted(tmp_path.iterdir())}

    for step in (1, 2, 3):
        _commit(_fake_tmp(tmp_path, "last", step), tmp_path / "last", {"step": step}, 3)
    real_rename = os.rename

    def killed_at_the_commit(src, dst):
        if ".tmp-" in str(src):
            raise KeyboardInterrupt  # the process dies between "dest -> dest.1" and "tmp -> dest"
        real_rename(src, dst)

    monkeypatch.setattr(sharded.os, "rename", killed_at_the_commit)
    tmp = _fake_tmp(tmp_path, "last", 4)
    with pytest.raises(KeyboardInterrupt):
        _commit(tmp, tmp_path / "last", {"step": 4}, 3)
    monkeypatch.undo()
    shutil.rmtree(tmp)
    assert steps() == {"last.1": 3, "last.2": 2, "last.3": 1}  # all three previous directories kept
    with pytest.warns(UserWarning, match="interrupted between its two renames"):
        assert resolve(tmp_path / "last") == tmp_path / "last.1"
    _commit(_fake_tmp(tmp_path, "last", 5), tmp_path / "last", {"step": 5}, 3)
    assert steps() == {"last": 5, "last.1": 3, "last.2": 2}
