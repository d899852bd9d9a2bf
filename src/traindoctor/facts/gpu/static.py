"""Static facts about GPU efficiency (TD801): host-device synchronisations in the training step.

A training step is the body of a loop whose own code runs ``backward()`` (the innermost such loop,
:func:`traindoctor.facts.training.static.training_loop_of`). A synchronisation there runs at every
step only when nothing guards it: the call sits in the loop's own code (no nested function), no
``if``/``match``/``try`` branch lies between it and the loop (``if step % log_every == 0:`` is the
usual guard; the ``if``'s own test still runs every step) and no other loop does (a nested loop
may run any number of times, or none).

What counts as a synchronisation, as written (the runtime half sees every one of them):

* ``x.item()``, ``x.tolist()``, ``x.cpu()``, ``x.to("cpu")`` on anything but a module or an
  optimizer;
* ``print(loss)`` or an f-string ``f"{loss:.3f}"`` of a name that is backpropagated in the same
  function (the loss): printing a CUDA tensor copies it to the host;
* ``if loss > limit:`` / ``if torch.isnan(loss):``, an ``if`` whose test compares the
  backpropagated loss tensor itself (no ``.item()``), which calls ``Tensor.__bool__``.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: Tensor methods that wait for the device and return host values.
SYNC_METHODS = frozenset({"item", "tolist", "cpu"})
#: ``torch`` predicates whose result, tested by ``if``, is a device tensor turned into a bool.
_TENSOR_PREDICATES = frozenset({"torch.isnan", "torch.isinf", "torch.isfinite", "torch.any", "torch.all"})
#: Statements whose branches may not run at every step.
_BRANCHES = (ast.If, ast.Try, ast.Match, ast.With, ast.AsyncWith)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_RECEIVER_WORDS = ("model", "net", "module", "optim", "scheduler", "ema")


class SyncSite:
    """One synchronisation that runs at every training step: the node, the loop, how it reads."""

    __slots__ = ("loop", "node", "text")

    def __init__(self, node: ast.AST, loop: ast.AST, text: str) -> None:
        self.node = node
        self.loop = loop
        self.text = text

    def __repr__(self) -> str:
        return f"SyncSite({self.text!r}, line {getattr(self.node, 'lineno', '?')})"


def _module_like(receiver: ast.expr) -> bool:
    """``model.cpu()``, ``self.net.cpu()``, ``optimizer...``: not a tensor."""
    parts: list[str] = []
    node: ast.expr = receiver
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    leaf = parts[0].lower() if parts else ""
    return any(w in leaf for w in _RECEIVER_WORDS)


def _sync_call(call: ast.Call) -> bool:
    func = call.func
    if not isinstance(func, ast.Attribute) or _module_like(func.value):
        return False
    if func.attr in SYNC_METHODS:
        return not call.args and not call.keywords
    if func.attr == "to" and len(call.args) == 1 and not call.keywords:
        arg = call.args[0]
        return isinstance(arg, ast.Constant) and arg.value == "cpu"
    return False


def _loss_read(ctx: FileContext, node: ast.AST, losses: set[str]) -> bool:
    """``print(loss)``, ``f"{loss}"``, ``if loss > x``, ``if torch.isnan(loss)``: the loss tensor
    itself turned into host text or a bool."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
        return any(isinstance(a, ast.Name) and a.id in losses for a in node.args)
    if isinstance(node, ast.FormattedValue):
        return isinstance(node.value, ast.Name) and node.value.id in losses
    if isinstance(node, ast.If):
        test = node.test
        if isinstance(test, ast.Compare):
            if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in test.ops):
                return False  # ``if scaler is not None:`` tests no tensor value
            sides = [test.left, *test.comparators]
            return any(isinstance(s, ast.Name) and s.id in losses for s in sides)
        if isinstance(test, ast.Call) and ctx.qualname(test.func) in _TENSOR_PREDICATES:
            return any(isinstance(a, ast.Name) and a.id in losses for a in test.args[:1])
    return False


def _every_step(ctx: FileContext, node: ast.AST, loop: ast.AST) -> bool:
    """Whether nothing between ``node`` and ``loop`` may skip it (see the module docstring)."""
    child = node
    for anc in ctx.ancestors(node):
        if anc is loop:
            return True
        if isinstance(anc, _LOOPS) or isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return False
        if isinstance(anc, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return False
        if isinstance(anc, (ast.If, ast.IfExp)) and child is not anc.test:
            return False
        if isinstance(anc, _BRANCHES) and not isinstance(anc, ast.If):
            if isinstance(anc, (ast.With, ast.AsyncWith)):
                if any(ctx.within(child, item) for item in anc.items):
                    return False
            elif not (isinstance(anc, ast.Try) and any(child is s for s in anc.body)):
                return False
        if isinstance(anc, (ast.BoolOp,)) and child is not anc.values[0]:
            return False  # ``a and b.item()``: short-circuited
        child = anc
    return False


def step_syncs(ctx: FileContext) -> list[list[SyncSite]]:
    """Per training loop (in source order), the synchronisations that run at every step."""
    from traindoctor.facts.evaluation.static import backward_receivers
    from traindoctor.facts.training.static import is_backward, own_nodes

    def build(c: FileContext) -> list[list[SyncSite]]:
        out: list[list[SyncSite]] = []
        steps = set()  # the loops that run backward themselves, not in a nested loop
        for call in c.method_calls("backward") + c.method_calls("manual_backward"):
            loops = c.enclosing_loops(call)
            if loops and is_backward(call):
                steps.add(id(loops[0]))
        for loop in c.of(*_LOOPS):
            if id(loop) not in steps:
                continue
            # ``scaler.scale(loss).backward()`` names the scaler too: it holds no loss value
            losses = {n for n in backward_receivers(c, c.function_of(loop)) if "scaler" not in n.lower()}
            found: list[SyncSite] = []
            for node in own_nodes(loop):
                if isinstance(node, ast.Call) and _sync_call(node):
                    text = c.segment(node)
                elif _loss_read(c, node, losses):
                    text = c.segment(node.test if isinstance(node, ast.If) else node)
                else:
                    continue
                if _every_step(c, node, loop) and not _feeds_environment(c, node, loop):
                    found.append(SyncSite(node, loop, text))
            if found:
                found.sort(key=lambda s: (getattr(s.node, "lineno", 0), getattr(s.node, "col_offset", 0)))
                out.append(found)
        return out

    return ctx.shared("gpu.step_syncs", build)


def _feeds_environment(ctx: FileContext, node: ast.AST, loop: ast.AST) -> bool:
    """Whether the value read at ``node`` goes to an environment's ``step()`` in the same loop
    (``actions = q.argmax(1).cpu().numpy()`` ... ``envs.step(actions)``): the host needs it to go
    on, so the sync cannot be deferred (reinforcement learning's acting step)."""
    from traindoctor.facts.training.static import own_nodes
    from traindoctor.static.names import dotted

    steps = [
        n
        for n in own_nodes(loop)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "step"
        and "env" in (dotted(n.func.value) or "").lower()
    ]
    if not steps:
        return False
    if any(ctx.within(node, s) for s in steps):
        return True
    stmt = ctx.statement_of(node)
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    names = {t.id for target in targets for t in ast.walk(target) if isinstance(t, ast.Name)}
    return bool(names) and any(
        isinstance(a, ast.Name) and a.id in names for s in steps for a in ast.walk(s) if a is not s.func
    )


__all__ = ["SYNC_METHODS", "SyncSite", "step_syncs"]
