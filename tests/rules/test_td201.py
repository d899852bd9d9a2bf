"""TD201 batch-not-multiple-of-8: static and runtime.

The message (half precision named only under autocast) and the runtime batch under fp16 on a fake CUDA device.
"""

from __future__ import annotations

import textwrap

import torch
from helpers.rule_loops import FAKE_A100, codes, finding, mlp, vectors
from helpers.snippets import data_check
from torch import nn

import traindoctor
from traindoctor.check.engine import check_source
from traindoctor.config import Settings
from traindoctor.registry import get_rule


# ------------------------------------------------------------------ traindoctor check
def test_td201_message_and_threshold():
    src = """
    import torch
    from torch.utils.data import DataLoader
    a = DataLoader(ds, batch_size=100)
    b = DataLoader(ds, batch_size=4)
    c = DataLoader(ds, batch_size=64)
    model.cuda()
    loss.backward()
    """
    (finding,) = data_check(src, ["TD201"]).findings
    assert finding.location.row == 4
    assert "Batch size 100" in finding.message and "96 or 104" in finding.message


def _td201(source: str) -> list[str]:
    rule = get_rule("TD201")()
    result = check_source(textwrap.dedent(source), "t.py", Settings(), [rule])
    return [f.message for f in result.findings]


def test_td201_mentions_half_precision_only_under_autocast() -> None:
    plain = _td201(
        """
        import torch
        from torch.utils.data import DataLoader

        loader = DataLoader(train_ds, batch_size=100, shuffle=True)
        for x, y in loader:
            model(x.cuda()).sum().backward()
        """
    )
    (message,) = plain
    assert "fp16" not in message and "bf16" not in message and "half" not in message
    assert "Tensor Core" in message
    amp = _td201(
        """
        import torch
        from torch.utils.data import DataLoader

        loader = DataLoader(train_ds, batch_size=100, shuffle=True)
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x.cuda()).sum()
            loss.backward()
        """
    )
    (message,) = amp
    assert "fp16/bf16" in message


# ------------------------------------------------------------------ traindoctor run
def _fp16_cuda_loop(doctor, batch: int) -> None:
    doctor.uses_cuda = True  # what a CUDA run reports
    model = mlp(norm=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        doctor.emit("on_autocast_enter", "cuda", torch.float16)
        x, y = vectors(batch, seed=step)
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()


def test_td201_batch_not_multiple_of_8_under_fp16_on_cuda() -> None:
    with traindoctor.watch(select=["TD201"], device=FAKE_A100) as doctor:
        _fp16_cuda_loop(doctor, batch=12)
    f = finding(doctor, "TD201")
    assert f.evidence["batch"] == 12 and f.evidence["autocast_dtypes"] == ["float16"]
    assert f.evidence["linear_layers"] == 2
    assert "(8 or 16)" in f.message


def test_td201_silent_for_multiple_of_8_and_on_cpu() -> None:
    with traindoctor.watch(select=["TD201"], device=FAKE_A100) as good:
        _fp16_cuda_loop(good, batch=16)
    with traindoctor.watch(select=["TD201"]) as cpu:  # the real device: a CPU
        _fp16_cuda_loop(cpu, batch=12)
    assert codes(good) == [] and codes(cpu) == []
