"""traindoctor.checkpoint.save/load: full state, weights_only files, atomic writes, rotation."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import TensorDataset

from traindoctor import checkpoint
from traindoctor.checkpoint.state import NotPlainError

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _train_objects():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    return model, opt, sched, scaler


def _step(model, opt, sched, scaler):
    x = torch.randn(6, 4)
    loss = model(x).pow(2).mean() + np.random.rand() + random.random()
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
    return loss.item()


def test_save_then_load_restores_everything_and_continues_bit_exactly(tmp_path):
    model, opt, sched, scaler = _train_objects()
    for _ in range(3):
        _step(model, opt, sched, scaler)
    path = checkpoint.save(
        tmp_path / "ck.pt",
        model=model,
        optimizer=opt,
        scheduler=sched,
        scaler=scaler,
        step=3,
        epoch=0,
        extra={"best": 0.5},
    )
    expected = [_step(model, opt, sched, scaler) for _ in range(3)]
    expected_weights = {k: v.clone() for k, v in model.state_dict().items()}

    model2, opt2, sched2, scaler2 = _train_objects()
    torch.manual_seed(123)  # a different RNG position: load must restore it
    random.seed(5)
    np.random.seed(5)
    info = checkpoint.load(path, model=model2, optimizer=opt2, scheduler=sched2, scaler=scaler2)
    assert (info.step, info.epoch, info.extra) == (3, 0, {"best": 0.5})
    assert info.missing == []
    assert {"model", "optimizer", "scheduler", "scaler", "rng:torch", "rng:numpy", "rng:python"} <= set(info.restored)
    got = [_step(model2, opt2, sched2, scaler2) for _ in range(3)]
    assert got == expected
    for key, value in model2.state_dict().items():
        assert torch.equal(value, expected_weights[key]), key


def test_checkpoint_loads_with_weights_only_and_holds_plain_rng_state(tmp_path):
    model, opt, sched, scaler = _train_objects()
    _step(model, opt, sched, scaler)
    path = checkpoint.save(tmp_path / "ck.pt", model=model, optimizer=opt, scheduler=sched, scaler=scaler, step=1)
    data = torch.load(path, weights_only=True)
    assert data["format"] == "traindoctor.checkpoint/1"
    assert data["rng"]["torch"].dtype == torch.uint8
    assert data["rng"]["python"]["state"].shape == (625,)
    assert data["rng"]["numpy"]["keys"].shape == (624,)
    assert data["scaler"]["scale"] == 1024.0
    assert "momentum_buffer" in data["optimizer"]["state"][0]


def test_save_rejects_values_that_would_need_pickle(tmp_path):
    model, *_ = _train_objects()
    with pytest.raises(NotPlainError, match=r"extra\]\['fn'\]|\['extra'\]\['fn'\]"):
        checkpoint.save(tmp_path / "ck.pt", model=model, extra={"fn": object()})
    assert not (tmp_path / "ck.pt").exists()
    assert list(tmp_path.iterdir()) == []


def test_load_warns_and_lists_components_missing_from_the_file(tmp_path):
    model, opt, sched, _ = _train_objects()
    path = checkpoint.save(tmp_path / "ck.pt", model=model, optimizer=opt)
    with pytest.warns(UserWarning, match="scheduler"):
        info = checkpoint.load(path, model=model, optimizer=opt, scheduler=sched)
    assert info.missing == ["scheduler"]


def test_keep_last_rotates_numbered_and_plain_names(tmp_path):
    model, *_ = _train_objects()
    for step in (1, 2, 3, 10):
        checkpoint.save(tmp_path / f"step_{step}.pt", model=model, step=step, keep_last=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_10.pt", "step_3.pt"]
    plain = tmp_path / "plain"
    for step in range(4):
        checkpoint.save(plain / "last.pt", model=model, step=step, keep_last=3)
    assert sorted(p.name for p in plain.iterdir()) == ["last.pt", "last.pt.1", "last.pt.2"]
    steps = [torch.load(plain / n, weights_only=True)["step"] for n in ("last.pt", "last.pt.1", "last.pt.2")]
    assert steps == [3, 2, 1]


def test_resumable_loader_resumes_mid_epoch_with_workers_bit_exactly():
    data = TensorDataset(torch.arange(36).float().unsqueeze(1))

    def make():
        return checkpoint.ResumableLoader(data, batch_size=4, shuffle=True, seed=7, num_workers=2)

    reference = []
    full = make()
    for _ in range(2):
        reference += [b[0].flatten().tolist() for b in full]
    assert reference[:9] != reference[9:]  # each epoch has its own order

    first = make()
    got = []
    for batch in first:
        got.append(batch[0].flatten().tolist())
        if len(got) == 3:
            break
    state = first.state_dict()
    assert (state["epoch"], state["batches_done"]) == (0, 3)
    resumed = make()
    resumed.load_state_dict(state)
    for _ in range(2):
        got += [b[0].flatten().tolist() for b in resumed]
        if len(got) >= 18:
            break
    assert got[:18] == reference


def test_resumable_loader_does_not_draw_from_the_global_generator():
    data = TensorDataset(torch.arange(8).float())
    torch.manual_seed(0)
    before = torch.get_rng_state()
    list(checkpoint.ResumableLoader(data, batch_size=2, shuffle=True))
    assert torch.equal(before, torch.get_rng_state())


KILLED_WRITER = textwrap.dedent("""
    import io, sys, time
    import torch
    from traindoctor import checkpoint
    from traindoctor.checkpoint import atomic

    path = sys.argv[1]
    model = torch.nn.Linear(64, 64)
    checkpoint.save(path, model=model, step=1)

    def half_then_hang(obj, fh):
        buf = io.BytesIO()
        torch.save(obj, buf)
        data = buf.getvalue()
        fh.write(data[: len(data) // 2])
        fh.flush()
        print("HALF-WRITTEN", flush=True)
        time.sleep(60)

    atomic._serialize = half_then_hang
    with torch.no_grad():
        model.weight.add_(1.0)
    checkpoint.save(path, model=model, step=2)
""")


def test_sigkill_during_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    from traindoctor.checkpoint.inspect import CheckpointReadError, inspect_checkpoint

    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    path = tmp_path / "ck" / "last.pt"
    env = dict(os.environ, PYTHONPATH=SRC)
    proc = subprocess.Popen([sys.executable, str(script), str(path)], stdout=subprocess.PIPE, env=env)
    try:
        line = proc.stdout.readline()
        assert line.strip() == b"HALF-WRITTEN"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    partial = [p for p in path.parent.iterdir() if p.name != "last.pt"]
    assert len(partial) == 1 and ".tmp-" in partial[0].name
    with pytest.raises(CheckpointReadError, match=r"truncated|corrupt"):
        inspect_checkpoint(partial[0])
    assert torch.load(path, weights_only=True)["step"] == 1
    model = torch.nn.Linear(64, 64)
    assert checkpoint.load(path, model=model, rng=False).step == 1
    # The next successful save removes the dead writer's temporary file.
    checkpoint.save(path, model=model, step=3)
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.pt"]
