"""``traindoctor run --tensorboard DIR``: per-step scalars, read back with TensorBoard's reader."""

from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import pytest

from traindoctor.doctor.cli import main
from traindoctor.report import tensorboard as tb

#: 400 tiny steps: more than the report's timeline keeps (300 points), every one in TensorBoard.
LOOP = textwrap.dedent(
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(1600, 4), torch.randn(1600, 1))
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in DataLoader(data, batch_size=4):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    """
)


def _read(logdir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_run_writes_every_steps_scalars_to_tensorboard(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard", reason="tensorboard is not installed: pip install tensorboard")
    script = tmp_path / "train.py"
    script.write_text(LOOP)
    logdir = tmp_path / "tb"
    out = tmp_path / "report.json"
    assert main(["--output-format", "json", "-o", str(out), "--tensorboard", str(logdir), str(script)]) == 0
    report = json.loads(out.read_text())
    acc = _read(logdir)
    tags = set(acc.Tags()["scalars"])
    for tag in (
        "step_ms/step",
        "step_ms/data_wait",
        "step_ms/transfer",
        "step_ms/compute",
        "step_ms/optimizer",
        "throughput/samples_per_s",
        "memory_mib/rss",
    ):
        assert f"traindoctor/{tag}" in tags
    data_wait = acc.Scalars("traindoctor/step_ms/data_wait")
    assert [e.step for e in data_wait] == list(range(1, 401))  # full resolution
    assert len(report["timeline"]) <= 300  # while the report's timeline is capped
    rates = acc.Scalars("traindoctor/throughput/samples_per_s")
    step_ms = acc.Scalars("traindoctor/step_ms/step")
    for rate, step in zip(rates[5:15], step_ms[5:15]):
        assert rate.value == pytest.approx(4 / (step.value / 1000), rel=1e-3)
    steady = [e.value for e in data_wait[report["profile"]["warmup_steps"] :]]
    assert sum(steady) / len(steady) == pytest.approx(report["profile"]["per_step_ms"]["data_wait"], rel=1e-3, abs=1e-3)


def test_missing_tensorboard_is_a_clear_message_before_the_run(tmp_path, monkeypatch, capsys) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    script = tmp_path / "never_run.py"
    script.write_text("open(__file__ + '.ran', 'w').close()\n")
    assert main(["--tensorboard", str(tmp_path / "tb"), str(script)]) == 2
    err = capsys.readouterr().err
    assert err == f"traindoctor run: {tb.MISSING_TENSORBOARD}\n"
    assert not (tmp_path / "never_run.py.ran").exists()


def test_scalars_of_a_point_by_tag() -> None:
    point = {
        "step": 3,
        "steps": 1,
        "t_s": 0.5,
        "warmup": False,
        "wall_ms": 10.0,
        "data_ms": 4.0,
        "other_host_ms": 1.0,
        "samples": 8,
        "samples_per_s": 800.0,
        "rss_bytes": 3 * 2**20,
    }
    assert tb.scalars(point) == {
        "traindoctor/step_ms/step": 10.0,
        "traindoctor/step_ms/data_wait": 4.0,
        "traindoctor/step_ms/other_host": 1.0,
        "traindoctor/throughput/samples_per_s": 800.0,
        "traindoctor/memory_mib/rss": 3.0,
    }
