"""verify-resume on GPU-correct terms (issue 22 item 9), checked on the CPU: final states are
compared per tensor on the CPU within a tolerance relative to the tensor's own scale, --bitwise
compares bit for bit, and --noise-floor widens the tolerance to what two uninterrupted runs differ
by."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from traindoctor.resume.cli import _tolerance, build_parser, split_argv
from traindoctor.resume.compare import compare_states, loss_noise, noise_floor, relative_difference, tensors_close


def test_the_tolerance_is_relative_to_each_tensors_scale() -> None:
    # large weights: a difference of 0.5 on 1e6 is 5e-7 relative (an absolute atol would fail it)
    assert tensors_close(torch.tensor([1e6, 0.0]), torch.tensor([1e6, 0.5]), 1e-5)
    # a tiny tensor that changed completely (an atol of tol * 1e-3 = 1e-8 would pass it)
    assert not tensors_close(torch.tensor([1e-10, 2e-10]), torch.tensor([3e-10, -2e-10]), 1e-5)
    # near-zero Adam moments beside large ones: judged against the tensor's magnitude
    assert tensors_close(torch.tensor([1.0, 1e-9]), torch.tensor([1.0, 2e-9]), 1e-5)
    assert relative_difference(torch.tensor([2.0, 4.0]), torch.tensor([2.0, 3.0])) == 0.25
    nan = torch.tensor([math.nan, 1.0])
    assert tensors_close(nan, nan.clone(), 0.0) and tensors_close(nan, nan.clone(), 1e-5)
    assert not tensors_close(torch.tensor([1.0]), torch.tensor([1.0 + 2**-20]), 0.0)  # bitwise
    state = {"model": {"w": torch.tensor([1.0, 2.0])}, "optimizers": [{"step": torch.tensor(3)}]}
    other = {"model": {"w": torch.tensor([1.0, 2.5])}, "optimizers": [{"step": torch.tensor(3)}]}
    assert compare_states(state, other, 1e-5) == ["model.w"]
    assert noise_floor(state, other) == 0.2


def _run(tmp_path: Path, name: str, losses: list[float], w: list[float]) -> SimpleNamespace:
    final = tmp_path / f"{name}.pt"
    torch.save({"models": {"0:Linear": {"w": torch.tensor(w)}}, "optimizers": []}, final)
    record = {"losses": {str(i + 1): [v.hex()] for i, v in enumerate(losses)}, "cuda_used": True}
    return SimpleNamespace(record=record, final=final)


def _opts(*argv: str) -> object:
    ours, _, _ = split_argv([*argv, "train.py", "--resume-args", "--resume"])
    return build_parser().parse_args(ours)


def test_bitwise_and_the_noise_floor_set_the_tolerance(tmp_path: Path) -> None:
    ref = _run(tmp_path, "ref", [1.0, 0.5], [1.0, 2.0])
    res = _run(tmp_path, "res", [1.0, 0.5], [1.0, 2.0])
    second = _run(tmp_path, "second", [1.0, 0.5 * (1 + 3e-5)], [1.0, 2.0 * (1 + 1e-4)])
    assert _tolerance(_opts(), ref, res, None) == (1e-5, "")  # a CUDA run's default
    assert _tolerance(_opts("--bitwise"), ref, res, second) == (0.0, "")
    assert loss_noise(ref.record, second.record) == pytest.approx(3e-5, rel=1e-3)
    tol, note = _tolerance(_opts("--noise-floor"), ref, res, second)
    assert math.isclose(tol, 2e-4, rel_tol=1e-3)  # twice the state's 1e-4, above the default
    assert (
        note
        == "noise floor: two uninterrupted runs differ by up to 0.0001 (relative); compared within 0.0002 (2x that, or the tolerance when larger)"
    )
    same, note = _tolerance(_opts("--noise-floor"), ref, res, _run(tmp_path, "same", [1.0, 0.5], [1.0, 2.0]))
    assert (same, note) == (1e-5, "noise floor: two uninterrupted runs are bitwise identical")
