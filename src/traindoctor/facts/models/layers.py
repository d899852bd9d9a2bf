"""Which ``torch.nn`` layers a piece of code constructs: the bottom of the model facts
(:mod:`traindoctor.facts.models.static` builds on it), kept apart so that file stays readable."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from traindoctor.facts.models.torchvision import torchvision_model
from traindoctor.facts.models.vocab import COMPOSITE_KINDS

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


def torch_nn_name(ctx: FileContext, func: ast.AST) -> str | None:
    """``nn.Conv2d`` / ``torch.nn.modules.conv.Conv2d`` -> ``"Conv2d"``; else None."""
    qn = ctx.qualname(func)
    if qn is None:
        return None
    if qn.startswith("torch.nn.modules."):
        return qn.rsplit(".", 1)[-1]
    if qn.startswith("torch.nn.") and qn.count(".") == 2:
        return qn.rsplit(".", 1)[-1]
    return None


def kinds_in(ctx: FileContext, node: ast.AST) -> set[str]:
    """Every torch.nn layer constructed inside ``node`` (lower bound of a model's kinds)."""
    out: set[str] = set()
    for sub in ctx.walk(node):
        if isinstance(sub, ast.Call):
            name = torch_nn_name(ctx, sub.func)
            if name is not None and name[:1].isupper():
                out.add(f"torch.nn.{name}")
                out.update(f"torch.nn.{k}" for k in COMPOSITE_KINDS.get(name, ()))
            elif (ctx.qualname(sub.func) or "") in ("torch.nn.functional.dropout", "torch.nn.functional.dropout2d"):
                out.add("torch.nn.functional.dropout")
            elif isinstance(sub.func, ast.Attribute) and sub.func.attr.startswith(("resnet", "vgg", "densenet")):
                qn = ctx.qualname(sub.func) or ""
                if qn.startswith("torchvision.models."):
                    tv = torchvision_model(qn.rsplit(".", 1)[-1])
                    if tv is not None:
                        out |= tv.kinds
    return out


def returns_a_container(ctx: FileContext, fn: ast.FunctionDef) -> bool:
    """Whether ``fn`` returns (alone or in a tuple) a variable it binds to a ``torch.nn``
    module it fills (``module_list = nn.ModuleList()``)."""
    built = {
        t.id
        for node in ctx.walk(fn)
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and torch_nn_name(ctx, node.value.func)
        for t in node.targets
        if isinstance(t, ast.Name)
    }
    for node in ctx.walk(fn):
        if isinstance(node, ast.Return) and node.value is not None:
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            if any(isinstance(v, ast.Name) and v.id in built for v in values):
                return True
    return False


def stored_on_self(ctx: FileContext, call: ast.Call) -> bool:
    """Whether ``call`` is the value of an assignment to ``self.<attr>`` (alone or in a tuple)."""
    stmt = ctx.parent(call)
    if not isinstance(stmt, ast.Assign):
        return False
    for target in stmt.targets:
        for t in target.elts if isinstance(target, ast.Tuple) else [target]:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                return True
    return False
