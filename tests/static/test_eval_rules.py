"""Autograd / mode facts (facts/evaluation/static.py) and the evaluation rules TD701-TD703."""

from __future__ import annotations

import ast
import textwrap

from traindoctor.check.engine import check_source, file_context, instantiate
from traindoctor.config import Settings
from traindoctor.facts.evaluation.static import TRAIN, grad_enabled_at, mode_state
from traindoctor.static.context import FileContext

CODES = ["TD701", "TD702", "TD703"]


def _ctx(src: str) -> FileContext:
    src = textwrap.dedent(src)
    return file_context("train.py", src, ast.parse(src), Settings(min_torch_version="2.13"))


def _result(src: str, codes=CODES, **kw):
    result = check_source(
        textwrap.dedent(src), "train.py", Settings(min_torch_version="2.13"), instantiate(codes), **kw
    )
    assert not result.internal_errors
    return result


def _rows(src: str, codes=CODES) -> list[tuple[str, int]]:
    return [(f.code, f.location.row) for f in _result(src, codes).findings]


def _call_at(ctx: FileContext, row: int) -> ast.Call:
    return next(c for c in ctx.of(ast.Call) if c.lineno == row)


# ------------------------------------------------------------------------------ gradmode


def test_grad_enabled_follows_innermost_switch_and_decorators():
    ctx = _ctx("""
    import torch
    from torch import no_grad

    with no_grad():
        a = f(x)
        with torch.enable_grad():
            b = f(x)
    with torch.set_grad_enabled(False):
        c = f(x)

    @torch.inference_mode()
    def g():
        return f(x)

    def h():
        return f(x)
    """)
    assert [grad_enabled_at(ctx, _call_at(ctx, r)) for r in (6, 8, 10, 14, 17)] == [False, True, False, False, None]


def test_mode_state_through_a_helper_and_its_callers():
    ctx = _ctx("""
    def evaluate(model, loader):
        return [model(x) for x in loader]

    def main():
        net = Net()
        net.train()
        evaluate(net, val)
        net.eval()
        evaluate(net, test)
    """)
    fwd = _call_at(ctx, 3)
    fn = ctx.function_of(fwd)
    # one caller passes a model in training mode, the other in eval mode: not provably TRAIN
    assert mode_state(ctx, fwd, "model", fn) is None
    site = _call_at(ctx, 8)
    assert mode_state(ctx, site, "net", ctx.function_of(site)) == TRAIN


# ------------------------------------------------------------------------------ TD701


def test_td701_ignores_models_without_bn_or_dropout_and_eval_of_other_receivers():
    src = """
    import torch
    from torch import nn

    plain = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with torch.no_grad():
        plain(x)

    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.2))
    model.module.eval()
    with torch.no_grad():
        model(x)
    """
    assert _rows(src, ["TD701"]) == []


def test_td701_fires_after_train_even_when_another_model_is_put_in_eval():
    src = """
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    ema = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    model.train()
    ema.eval()
    with torch.no_grad():
        out = model(x)
        ref = ema(x)
    """
    result = _result(src, ["TD701"])
    assert [(f.location.row, f.location.column) for f in result.findings] == [(10, 11)]
    assert "`model.eval()`" in result.findings[0].message and "BatchNorm" in result.findings[0].message


def test_td701_silent_for_model_forward_with_frozen_backbone_and_lightning_hooks():
    src = """
    import torch
    import torchvision
    from torch import nn

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = torchvision.models.resnet50()
            self.head = nn.Linear(2048, 10)

        def forward(self, x):
            with torch.no_grad():
                feats = self.backbone(x)
            return self.head(feats)

        @torch.no_grad()
        def validation_step(self, batch, idx):
            return self.backbone(batch)
    """
    assert _rows(src, ["TD701"]) == []


# ------------------------------------------------------------------------------ TD702


def test_td702_region_ends_at_train_and_respects_enable_grad():
    src = """
    import torch

    def loop(model, loader):
        model.eval()
        a = model(x)
        with torch.enable_grad():
            b = model(x)
        model.train()
        c = model(x)
    """
    result = _result(src, ["TD702"])
    assert [f.location.row for f in result.findings] == [6]
    assert "torch.inference_mode()" in result.findings[0].message


def test_td702_silent_when_backward_follows_or_params_frozen_or_grad_off_globally():
    follows = """
    def tta(model, x, opt):
        model.eval()
        loss = model(x).entropy()
        loss.backward()
    """
    frozen = """
    model.requires_grad_(False)
    model.eval()
    out = model(x)
    """
    global_off = """
    import torch
    torch.set_grad_enabled(False)
    model.eval()
    out = model(x)
    """
    assert _rows(follows, ["TD702"]) == []
    assert _rows(frozen, ["TD702"]) == []
    assert _rows(global_off, ["TD702"]) == []


# ------------------------------------------------------------------------------ TD703


def test_td703_unsafe_fix_only():
    src = """
    total = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        total += loss
    """
    safe = _result(src, ["TD703"], fix=True)
    assert safe.fixed_source is None
    unsafe = _result(src, ["TD703"], fix=True, unsafe_fixes=True)
    assert unsafe.fixed_source.splitlines()[5] == "    total += loss.item()"
    assert _rows(unsafe.fixed_source, ["TD703"]) == []


def test_td703_silent_for_non_losses_and_losses_outside_training():
    src = """
    outputs = 0
    for x, y in loader:
        out = model(x)
        loss = criterion(out, y)
        loss.backward()
        outputs += out          # a model output, not a loss

    def evaluate(model, loader):
        total = 0
        for x, y in loader:
            loss = criterion(model(x), y)
            total += loss       # no backward in this function: not a training loop
        return total
    """
    assert _rows(src, ["TD703"]) == []


def test_td703_loss_rebound_from_item_is_not_attached():
    src = """
    total = 0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        loss = loss.item()
        total = total + loss
    """
    assert _rows(src, ["TD703"]) == []
    assert _rows(src.replace("        loss = loss.item()\n", ""), ["TD703"]) == [("TD703", 6)]


# ------------------------------------------------------------------------------ neither eval() nor no_grad

UNGUARDED = """
import torch
from torch import nn

model = nn.Sequential(nn.Linear(10, 10), nn.BatchNorm1d(10), nn.Linear(10, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(10):
    model.train()
    for x, y in train_loader:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    val_loss = 0.0
    for x, y in val_loader:
        val_loss += nn.functional.cross_entropy(model(x), y).item()
    accs = [(model(x).argmax(1) == y).float().mean() for x, y in test_loader]
"""


def test_validation_loop_without_eval_or_no_grad_gets_both_rules():
    found = _result(UNGUARDED).findings
    assert [(f.code, f.location.row, f.location.column) for f in found] == [
        ("TD701", 15, 49),
        ("TD702", 15, 49),
        ("TD701", 16, 14),
        ("TD702", 16, 14),
    ]
    assert "neither `eval()` nor `no_grad`" in found[0].message and "BatchNorm" in found[0].message
    assert "torch.inference_mode()" in found[1].message


def test_guarding_either_way_leaves_the_other_rule():
    with_eval = UNGUARDED.replace("    val_loss = 0.0\n", "    model.eval()\n    val_loss = 0.0\n")
    # eval() but no no_grad: TD702 (existing rule) on both evaluation forwards, no TD701
    assert {c for c, _ in _rows(with_eval)} == {"TD702"}
    with_no_grad = UNGUARDED.replace(
        "    for x, y in val_loader:\n        val_loss",
        "    with torch.no_grad():\n      for x, y in val_loader:\n        val_loss",
    )
    rows = _rows(with_no_grad)
    assert ("TD701", 16) in rows and ("TD702", 16) not in rows


def test_evaluation_loop_that_trains_or_has_no_mode_evidence_is_left_alone():
    # a backward after the loop uses what it computed (e.g. a meta-learning outer step)
    assert (
        _rows("""
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.1))
    model.train()
    meta = sum(model(x).sum() for x, _ in val_loader)
    meta.backward()
    """)
        == []
    )
    # a helper whose model comes from outside: its mode is unknown
    assert (
        _rows("""
    def evaluate(model, val_loader):
        return [model(x) for x, _ in val_loader]
    """)
        == []
    )


def test_comprehension_is_an_evaluation_loop_under_no_grad():
    rows = _rows("""
    import torch
    import torchvision

    def train(model, optimizer, train_loader, val_loader):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            return [model(x).argmax(1) for x, _ in val_loader]

    net = torchvision.models.resnet18()
    train(net, torch.optim.SGD(net.parameters(), lr=0.1), train_dl, val_dl)
    """)
    assert rows == [("TD701", 12)]
