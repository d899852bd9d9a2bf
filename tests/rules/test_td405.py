"""TD405 compile-recompiles: runtime only. The rule reads dynamo's guard failures and compile
time, which do not depend on the backend: the in-process loops compile with ``aot_eager`` (dynamo
and AOT autograd, no C++ build: seconds instead of minutes), the ``traindoctor run`` test with the
default CPU inductor backend, as users do."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.rule_loops import codes, finding
from helpers.run_cli import has_c_compiler, run_findings

import traindoctor

needs_c_compiler = pytest.mark.skipif(
    not has_c_compiler(), reason="torch.compile's CPU inductor backend needs a C compiler"
)


@pytest.fixture(autouse=True)
def _forget_compiled_frames():
    """Leave the process as uncompiled as it was: once dynamo has compiled a frame, the doctor
    keeps its layer patches for good (a changing forward would recompile), which later tests of
    the patch windows in this process would see."""
    yield
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()


def _train(dynamic: bool | None, batches: list[int]) -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    compiled = torch.compile(model, backend="aot_eager", dynamic=dynamic)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for n in batches:
        compiled(torch.randn(n, 4)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()


def test_td405_shape_churn_recompiles() -> None:
    with traindoctor.watch(select=["TD405"]) as doctor:
        _train(False, [2, 3, 4, 5, 6, 7])
    ev = finding(doctor, "TD405").evidence
    assert ev["recompiles"] == 5 and ev["graphs_compiled"] >= 6
    assert "size mismatch" in ev["reasons"][0] and ev["compile_seconds"] > 0


def test_td405_fixed_shapes_or_automatic_dynamic_are_healthy() -> None:
    with traindoctor.watch(select=["TD405"]) as doctor:
        _train(False, [4, 4, 4, 4, 4, 4])
    assert codes(doctor) == []
    with traindoctor.watch(select=["TD405"]) as doctor:
        _train(None, [2, 3, 4, 5, 6, 7])  # one recompile, then a dynamic graph
    assert codes(doctor) == []


SCRIPT = """
import torch

model = torch.nn.Linear(4, 1)
compiled = torch.compile(model, dynamic={dynamic})
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for n in [2, 3, 4, 5, 6, 7]:
    compiled(torch.randn(n, 4)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
"""


@needs_c_compiler
def test_td405_through_traindoctor_run(tmp_path: Path) -> None:
    found = run_findings(tmp_path, SCRIPT.format(dynamic=False), "TD405")
    assert [(f["code"], f["evidence"]["recompiles"]) for f in found] == [("TD405", 5)]
    assert run_findings(tmp_path, SCRIPT.format(dynamic=None), "TD405") == []
