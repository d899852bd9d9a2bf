"""Autograd and mode facts (facts/evaluation/static.py) and evaluation loops as TD701/TD702 see them:
the grad mode at a call, a model's mode through helpers, loops guarded by neither ``eval()`` nor
``no_grad``, and JAX programs, which are no PyTorch evaluation.
"""

from __future__ import annotations

import ast
import textwrap

from helpers.project_tree import checked_rows
from helpers.snippets import eval_check, eval_rows

from traindoctor.check.engine import file_context
from traindoctor.config import Settings
from traindoctor.facts.evaluation.flow import mode_state
from traindoctor.facts.evaluation.static import TRAIN, grad_enabled_at
from traindoctor.static.context import FileContext


def _ctx(src: str) -> FileContext:
    src = textwrap.dedent(src)
    return file_context("train.py", src, ast.parse(src), Settings(min_torch_version="2.13"))


def _call_at(ctx: FileContext, row: int) -> ast.Call:
    return next(c for c in ctx.of(ast.Call) if c.lineno == row)


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
    found = eval_check(UNGUARDED).findings
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
    assert {c for c, _ in eval_rows(with_eval)} == {"TD702"}
    with_no_grad = UNGUARDED.replace(
        "    for x, y in val_loader:\n        val_loss",
        "    with torch.no_grad():\n      for x, y in val_loader:\n        val_loss",
    )
    rows = eval_rows(with_no_grad)
    assert ("TD701", 16) in rows and ("TD702", 16) not in rows


def test_evaluation_loop_that_trains_or_has_no_mode_evidence_is_left_alone():
    # a backward after the loop uses what it computed (e.g. a meta-learning outer step)
    assert (
        eval_rows("""
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
        eval_rows("""
    def evaluate(model, val_loader):
        return [model(x) for x, _ in val_loader]
    """)
        == []
    )


FLAX = """
import jax
import flax
from flax.training.common_utils import shard

parallel_eval_step = jax.pmap(eval_step, "batch")
eval_metrics = []
for batch in eval_loader:
    model_inputs = shard(batch)
    eval_metrics.append(parallel_eval_step(state.params, model_inputs))
"""


def test_a_flax_evaluation_loop_is_not_a_pytorch_evaluation(tmp_path):
    assert checked_rows(tmp_path, {"eval.py": FLAX}, "eval.py", ["TD701", "TD702"]) == []


def test_the_same_loop_over_a_torch_model_is_reported(tmp_path):
    source = FLAX.replace("import jax\nimport flax\n", "import torch\nimport jax\n")
    assert checked_rows(tmp_path, {"eval.py": source}, "eval.py", ["TD702"]) == [("TD702", 9)]
