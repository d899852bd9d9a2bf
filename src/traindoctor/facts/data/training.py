"""Whether a file trains, drives training done elsewhere, or runs code without gradients: the
context that decides whether the data rules apply at all."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from traindoctor.static.args import MISSING, UNKNOWN
from traindoctor.static.names import OPTIMIZERS, dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def callee_name(call: ast.Call) -> str:
    text = dotted(call.func)
    return text.rsplit(".", 1)[-1] if text else ""


def decorator_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    text = dotted(node)
    return text.rsplit(".", 1)[-1] if text else ""


def file_trains(ctx: FileContext) -> bool:
    """Whether the file trains: a ``backward()``, an optimizer, or a Lightning ``training_step``."""
    if ctx.method_calls("backward"):
        return True
    if any(ctx.calls_to(o) for o in sorted(OPTIMIZERS)):
        return True
    return any(fn.name == "training_step" for fn in ctx.of(*_FUNCS))


def exclusive_branches(ctx: FileContext, a: ast.AST, b: ast.AST) -> bool:
    """Whether ``a`` and ``b`` sit in different branches of one if/try/match statement.

    Two assignments in ``if x: ... else: ...`` never both run, so neither overrides the other.
    """
    above_a = {id(n) for n in ctx.ancestors(a)}
    for anc in ctx.ancestors(b):
        if id(anc) not in above_a:
            continue
        if isinstance(anc, (ast.If, ast.Try)):
            in_body = [any(ctx.within(x, s) for s in anc.body) for x in (a, b)]
            return in_body[0] != in_body[1]
        if type(anc).__name__ == "Match":
            return True
        return False
    return False


def under_no_grad(ctx: FileContext, node: ast.AST) -> bool:
    """Whether ``node`` runs inside ``torch.no_grad()``/``inference_mode()`` (block or decorator)."""
    for anc in ctx.ancestors(node):
        if isinstance(anc, (ast.With, ast.AsyncWith)):
            for item in anc.items:
                if _disables_grad(ctx, item.context_expr):
                    return True
        elif isinstance(anc, _FUNCS):
            if any(_disables_grad(ctx, d) for d in anc.decorator_list):
                return True
    return False


def _disables_grad(ctx: FileContext, expr: ast.AST) -> bool:
    func = expr.func if isinstance(expr, ast.Call) else expr
    qn = ctx.qualname(func) or ""
    if not qn.startswith("torch."):
        return False
    leaf = qn.rsplit(".", 1)[-1]
    if leaf in ("no_grad", "inference_mode"):
        return True
    if leaf == "set_grad_enabled" and isinstance(expr, ast.Call) and expr.args:
        return ctx.value(expr.args[0]) is False
    return False


def is_lightning_train_hook(ctx: FileContext, fn: ast.AST) -> bool:
    """``def train_dataloader(self)`` of a LightningModule/DataModule, or the method the class
    binds to that name (``self.train_dataloader = self._train_dataloader`` in ``__init__``): the
    trainer iterates it once per epoch (it is built once unless
    ``reload_dataloaders_every_n_epochs`` is set)."""
    name = getattr(fn, "name", "")
    cls = ctx.parent(fn)
    if not isinstance(cls, ast.ClassDef) or not any(
        (dotted(base) or "").endswith(("LightningModule", "LightningDataModule")) for base in cls.bases
    ):
        return False
    return name == "train_dataloader" or name in _bound_train_hooks(ctx, cls)


def _bound_train_hooks(ctx: FileContext, cls: ast.ClassDef) -> set[str]:
    """Methods a class assigns to ``self.train_dataloader`` (directly or through ``partial``)."""
    out: set[str] = set()
    for node in ctx.walk(cls):
        if not isinstance(node, ast.Assign) or len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        if not (isinstance(target, ast.Attribute) and target.attr == "train_dataloader" and _is_self(target.value)):
            continue
        if isinstance(value, ast.Call) and callee_name(value) == "partial" and value.args:
            value = value.args[0]
        if isinstance(value, ast.Attribute) and _is_self(value.value):
            out.add(value.attr)
    return out


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def drives_training(ctx: FileContext) -> bool:
    """Whether the file trains (:func:`file_trains`) or drives training done elsewhere: an epoch
    loop (``for epoch in range(...)``) around calls such as ``engine.train_one_epoch(...)``.

    Questions about other project modules are only asked in such files, so library code that
    merely imports its siblings never pays for reading them."""
    if file_trains(ctx):
        return True
    return any(is_epoch_loop(loop) for loop in ctx.of(ast.For))


def is_epoch_loop(loop: ast.For) -> bool:
    """``for epoch in ...``, ``for cur_epoch in ...``, ``for ep in range(start_ep, args.ep)``: a
    loop over epochs, by the name of its counter. (A ``range(epochs)`` bound alone does not say
    it: ``for _ in range(epochs)`` also repeats feature extraction.)"""
    from traindoctor.facts.data.names import name_tokens

    target = loop.target
    return isinstance(target, ast.Name) and ("epoch" in target.id.lower() or "ep" in name_tokens(target.id))


def literal_false(node: object) -> bool:
    """Whether an argument node is the literal ``False`` (a fix may flip it in place)."""
    return isinstance(node, ast.Constant) and node.value is False


def known(value: object) -> bool:
    return value is not UNKNOWN and value is not MISSING
