"""Runtime halves of TD401-TD403 (cudnn flags).

TD401/TD402 are GPU-only: a real CPU conv loop runs under a fake CUDA device, and the conv
forwards a CUDA run would record are replayed into the module statistics. TD403 needs no GPU.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from rule_loops import FAKE_A100, codes, conv_bn_net, finding, line_of, train_steps

import traindoctor
from traindoctor.runtime.probes.modules import module_stats


@pytest.fixture(autouse=True)
def _restore_cudnn_flags() -> Iterator[None]:
    cudnn = torch.backends.cudnn
    saved = (cudnn.benchmark, cudnn.deterministic)
    yield
    cudnn.benchmark, cudnn.deterministic = saved


def _cuda_conv_run(doctor, shapes: list[tuple[int, ...]]) -> None:
    """Real CPU steps, plus one replayed CUDA conv forward per shape."""
    doctor.uses_cuda = True  # what a CUDA run reports
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_steps(model, opt, steps=2)
    assert doctor.notes == []  # the CUDA step clock stays out of the way on a CPU build
    stats = module_stats(doctor)
    for shape in shapes:
        stats.record(model[0], "conv", shape, "cuda", True, True)


# ---------------------------------------------------------------- TD401
def test_td401_fixed_shapes_without_benchmark() -> None:
    with traindoctor.watch(select=["TD401"], device=FAKE_A100) as doctor:
        _cuda_conv_run(doctor, [(32, 3, 8, 8)] * 19 + [(8, 3, 8, 8)])  # last batch is partial
    f = finding(doctor, "TD401")
    assert f.evidence == {
        "conv_layers": 1,
        "conv_forwards": 20,
        "max_distinct_shapes": 2,
        "example_shape": [32, 3, 8, 8],
    }


def test_td401_silent_with_benchmark_deterministic_variable_shapes_or_cpu() -> None:
    fixed = [(32, 3, 8, 8)] * 20
    with traindoctor.watch(select=["TD401"], device=FAKE_A100) as bench:
        torch.backends.cudnn.benchmark = True
        _cuda_conv_run(bench, fixed)
    torch.backends.cudnn.benchmark = False
    with traindoctor.watch(select=["TD401"], device=FAKE_A100) as determ:
        torch.backends.cudnn.deterministic = True
        _cuda_conv_run(determ, fixed)
    torch.backends.cudnn.deterministic = False
    with traindoctor.watch(select=["TD401"], device=FAKE_A100) as variable:
        _cuda_conv_run(variable, [(32, 3, 8 + i, 8) for i in range(20)])
    with traindoctor.watch(select=["TD401"]) as cpu:
        model = conv_bn_net()
        train_steps(model, torch.optim.SGD(model.parameters(), lr=0.1), steps=12)
    assert codes(bench) == codes(determ) == codes(variable) == codes(cpu) == []


# ---------------------------------------------------------------- TD402
def test_td402_benchmark_with_changing_shapes() -> None:
    with traindoctor.watch(select=["TD402"], device=FAKE_A100) as doctor:
        torch.backends.cudnn.benchmark = True
        _cuda_conv_run(doctor, [(8, 3, 8 + i % 12, 8) for i in range(40)])
    f = finding(doctor, "TD402")
    assert f.evidence["distinct_shapes"] == 12 and f.evidence["forwards"] == 40
    assert f.evidence["example_shapes"][0] == [8, 3, 8, 8]


def test_td402_silent_for_fixed_shapes_or_benchmark_off() -> None:
    with traindoctor.watch(select=["TD402"], device=FAKE_A100) as fixed:
        torch.backends.cudnn.benchmark = True
        _cuda_conv_run(fixed, [(8, 3, 8, 8)] * 40)
    torch.backends.cudnn.benchmark = False
    with traindoctor.watch(select=["TD402"], device=FAKE_A100) as off:
        _cuda_conv_run(off, [(8, 3, 8 + i % 12, 8) for i in range(40)])
    assert codes(fixed) == codes(off) == []


# ---------------------------------------------------------------- TD403
def test_td403_benchmark_and_deterministic() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD403"]) as doctor:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = True  # the later assignment
        train_steps(model, opt, steps=1)
    f = finding(doctor, "TD403")
    assert f.filename == __file__ and f.location.row == line_of("# the later assignment")
    assert f.step == 1


def test_td403_silent_for_one_flag() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD403"]) as doctor:
        torch.backends.cudnn.deterministic = True
        train_steps(model, opt, steps=1)
    assert codes(doctor) == []
    assert type(torch.backends.cudnn).__dict__["benchmark"].__class__.__name__ == "ContextProp"
