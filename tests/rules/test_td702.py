"""TD702 eval-with-grad: static.

The runtime tests on the evaluation loop shared with TD701 are in tests/runtime/test_eval_rules.py
(the findings must point to that loop's lines, in the tests' own file).
"""

from __future__ import annotations

from helpers.snippets import eval_check, eval_rows


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
    result = eval_check(src, ["TD702"])
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
    assert eval_rows(follows, ["TD702"]) == []
    assert eval_rows(frozen, ["TD702"]) == []
    assert eval_rows(global_off, ["TD702"]) == []
