"""Autograd / mode facts (static/gradmode.py) and the evaluation rules TD701-TD703."""

from __future__ import annotations

import ast
import textwrap

from traindoctor.config import Settings
from traindoctor.static.context import FileContext
from traindoctor.static.engine import check_source, instantiate
from traindoctor.static.gradmode import TRAIN, grad_enabled_at, mode_state

CODES = ["TD701", "TD702", "TD703"]


def _ctx(src: str) -> FileContext:
    src = textwrap.dedent(src)
    return FileContext("train.py", src, ast.parse(src), Settings(min_torch_version="2.13"))


def _result(src: str, codes=CODES, **kw):
    result = check_source(textwrap.dedent(src), "train.py", Settings(min_torch_version="2.13"), instantiate(codes), **kw)
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
