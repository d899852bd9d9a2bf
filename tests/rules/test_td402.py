"""TD402 cudnn-benchmark-variable-shapes: runtime."""

from __future__ import annotations

import pytest
import torch
from helpers.rule_loops import FAKE_A100, codes, cuda_conv_run, finding

import traindoctor

pytestmark = pytest.mark.usefixtures("restore_cudnn_flags")


def test_td402_benchmark_with_changing_shapes() -> None:
    with traindoctor.watch(select=["TD402"], device=FAKE_A100) as doctor:
        torch.backends.cudnn.benchmark = True
        cuda_conv_run(doctor, [(8, 3, 8 + i % 12, 8) for i in range(40)])
    f = finding(doctor, "TD402")
    assert f.evidence["distinct_shapes"] == 12 and f.evidence["forwards"] == 40
    assert f.evidence["example_shapes"][0] == [8, 3, 8, 8]


def test_td402_silent_for_fixed_shapes_or_benchmark_off() -> None:
    with traindoctor.watch(select=["TD402"], device=FAKE_A100) as fixed:
        torch.backends.cudnn.benchmark = True
        cuda_conv_run(fixed, [(8, 3, 8, 8)] * 40)
    torch.backends.cudnn.benchmark = False
    with traindoctor.watch(select=["TD402"], device=FAKE_A100) as off:
        cuda_conv_run(off, [(8, 3, 8 + i % 12, 8) for i in range(40)])
    assert codes(fixed) == codes(off) == []
