"""Messages say only what fits the model (issue 9): TD701 mentions BatchNorm statistics only when
the model has BatchNorm, TD201 half precision only under autocast, TD504 the data position only
when a loader is part-way through its epoch."""

from __future__ import annotations

import textwrap

import torch
from torch import nn

import traindoctor
from traindoctor.check.engine import check_source
from traindoctor.config import Settings
from traindoctor.registry import get_rule


def _eval_in_train_mode(model: nn.Module) -> traindoctor.runtime.session.Session:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    with traindoctor.watch(select=["TD701"]) as doctor:
        for _ in range(3):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                model(x)  # evaluation without model.eval()
    return doctor


def test_td701_speaks_of_batchnorm_only_when_the_model_has_it() -> None:
    dropout_only = _eval_in_train_mode(nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 1)))
    (finding,) = dropout_only.findings
    assert "Dropout stayed on" in finding.message and "BatchNorm" not in finding.message
    with_bn = _eval_in_train_mode(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1)))
    (finding,) = with_bn.findings
    assert "BatchNorm updated its running statistics" in finding.message
    assert "Dropout" not in finding.message


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


def test_td504_asks_for_the_data_position_only_with_a_loader() -> None:
    rule = get_rule("TD504")
    get_batch_loop = textwrap.dedent(
        """
        import torch

        optimizer = torch.optim.AdamW(model.parameters())
        while True:
            X, Y = get_batch("train")
            model(X, Y).backward()
            optimizer.step()
            if should_checkpoint():
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "rng": torch.get_rng_state()}, "ckpt.pt")
        """
    )
    assert check_source(get_batch_loop, "t.py", Settings(), [rule()]).findings == []
    loader_loop = get_batch_loop.replace('while True:\n    X, Y = get_batch("train")', "for X, Y in loader:")
    (finding,) = check_source(loader_loop, "t.py", Settings(), [rule()]).findings
    assert "data position" in finding.message
