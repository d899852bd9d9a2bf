"""The framework patterns the doctor must read right, on plain torch loops (no framework needed).

* An optimizer step with a closure (Lightning's automatic optimization, LBFGS) runs the last
  forward and backward of the step inside ``optimizer.step()``: accumulation counts them too.
* A ``torch.save`` made by a framework's own checkpoint writer (recognised by module and
  qualified name) is the framework's: the checkpoint rules do not judge it; the same save made by
  the user is judged.
"""

from __future__ import annotations

import sys
import textwrap
import types

import pytest
import torch
from torch import nn

import traindoctor
from traindoctor.runtime.framework_writers import CHECKPOINT_WRITERS, framework_writer


def _bn_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))


def test_closure_step_counts_the_backward_inside_step_for_accumulation() -> None:
    model = _bn_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    with traindoctor.watch(select=["TD202"]) as doctor:
        for step in range(4):
            chunks = [(x[i : i + 4], y[i : i + 4]) for i in range(step * 16, step * 16 + 16, 4)]
            for xb, yb in chunks[:-1]:  # accumulated micro-batches, backward outside step()
                nn.functional.mse_loss(model(xb), yb).backward()
            xb, yb = chunks[-1]

            def closure() -> torch.Tensor:  # the last micro-batch runs inside step(), as Lightning does
                loss = nn.functional.mse_loss(model(xb), yb)
                loss.backward()
                return loss

            opt.step(closure)
            opt.zero_grad()
    (finding,) = doctor.findings
    assert finding.code == "TD202"
    assert finding.evidence["backward_per_step"] == 4
    assert finding.evidence["effective_batch"] == 16
    assert "sees 16 per step (4 backward() calls" in finding.message


WRITER = textwrap.dedent(
    """
    import torch

    class Accelerator:
        def save_state(self, obj, path):
            torch.save(obj, path)

    def save(obj, path):  # a thin wrapper like ``accelerator.save``: the user's save
        torch.save(obj, path)
    """
)


@pytest.fixture()
def fake_accelerate(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A module named like accelerate's own (so its frames look like the framework's)."""
    monkeypatch.setitem(sys.modules, "accelerate", types.ModuleType("accelerate"))
    module = types.ModuleType("accelerate.accelerator")
    exec(compile(WRITER, "<fake accelerate.accelerator>", "exec"), module.__dict__)
    monkeypatch.setitem(sys.modules, "accelerate.accelerator", module)
    return module


def test_framework_checkpoint_writer_is_not_judged_but_a_user_save_through_a_wrapper_is(
    tmp_path, fake_accelerate
) -> None:
    assert "Accelerator.save_state" in CHECKPOINT_WRITERS["accelerate.accelerator"]
    model = nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with traindoctor.watch(select=["TD5"]) as doctor:
        for _ in range(2):
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            fake_accelerate.Accelerator().save_state(model.state_dict(), tmp_path / "pytorch_model.bin")
    assert doctor.findings == []
    with traindoctor.watch(select=["TD5"]) as doctor:
        for _ in range(2):
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            fake_accelerate.save(model.state_dict(), tmp_path / "weights.pt")
    assert [f.code for f in doctor.findings] == ["TD501"]  # bare weights: TD501 alone, as check says
    assert doctor.findings[0].evidence["path"] == str(tmp_path / "weights.pt")


def test_framework_writer_names_the_writer_and_ignores_user_frames(fake_accelerate) -> None:
    seen = []
    code = "def save_state(self):\n    seen.append(framework_writer(sys._getframe()))\n"
    namespace = {"__name__": "accelerate.accelerator", "seen": seen, "sys": sys, "framework_writer": framework_writer}
    exec(compile("class Accelerator:\n" + textwrap.indent(code, "    "), "<fake>", "exec"), namespace)
    namespace["Accelerator"]().save_state()
    assert seen == ["accelerate.accelerator:Accelerator.save_state"]
    assert framework_writer(sys._getframe()) is None  # this test's own frames are the user's
