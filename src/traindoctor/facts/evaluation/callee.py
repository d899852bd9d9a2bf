"""The class a called model is an instance of, and whether its ``forward`` turns autograd off
itself (``Pix2PixModel.forward`` runs its ``mode == "inference"`` branch under
``torch.no_grad()``): a caller that does not is then no evaluation with autograd recording."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from traindoctor.facts.evaluation.grad import decorator_switch, grad_switch

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: Calls that hand back the module they are given (``DDP(model)``, ``model.cuda()``).
_WRAPPING = frozenset(("torch.nn.DataParallel", "torch.nn.parallel.DistributedDataParallel", "torch.compile"))
_SAME = frozenset(("cuda", "to", "cpu", "float", "half", "double", "bfloat16", "eval", "train"))


def model_classes(ctx: FileContext, expr: ast.expr, depth: int = 0) -> list[tuple[FileContext, ast.ClassDef]] | None:
    """(the context of its module, the class) for every class whose construction ``expr`` (a
    model variable or ``self.<attr>``) may hold, as far as its bindings in the file tell; None
    when one of them is no construction of a class of the project."""
    if depth > 4:
        return None
    if isinstance(expr, ast.Name):
        bound = ctx.bindings_of(expr)
        if not bound or any(b is None for b in bound):
            return None
        values = [b for b in bound if b is not None]
    elif isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        cls = ctx.enclosing(expr, ast.ClassDef)
        if not isinstance(cls, ast.ClassDef):
            return None
        values = [
            s.value
            for s in ctx.walk(cls)
            if isinstance(s, ast.Assign)
            and any(isinstance(t, ast.Attribute) and t.attr == expr.attr and dotted_self(t.value) for t in s.targets)
        ]
        if not values:
            return None
    else:
        return None
    out: list[tuple[FileContext, ast.ClassDef]] = []
    for value in values:
        found = _constructed(ctx, value, depth)
        if found is None:
            return None
        out.extend(found)
    return out


def dotted_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _constructed(ctx: FileContext, value: ast.expr, depth: int) -> list[tuple[FileContext, ast.ClassDef]] | None:
    if isinstance(value, ast.Name):
        return model_classes(ctx, value, depth + 1)
    if not isinstance(value, ast.Call):
        return None
    func = value.func
    qn = ctx.qualname(func) or ""
    if qn in _WRAPPING and value.args:
        return _constructed(ctx, value.args[0], depth + 1)
    if isinstance(func, ast.Attribute) and func.attr in _SAME:
        return _constructed(ctx, func.value, depth + 1)
    if isinstance(func, ast.Name) and func.id not in ctx.imports.names:
        local = [s for s in ctx.tree.body if isinstance(s, ast.ClassDef) and s.name == func.id]
        return [(ctx, local[0])] if len(local) == 1 else None
    view = ctx.project
    resolved = view.resolve(func) if view is not None and view.imports_project else None
    if resolved is None or resolved.cls is None or resolved.summary is None or resolved.project is None:
        return None
    other = resolved.project.module_context(resolved.summary)
    if other is None:
        return None
    found = [s for s in other.tree.body if isinstance(s, ast.ClassDef) and s.name == resolved.name]
    return [(other, found[0])] if len(found) == 1 else None


def forward_disables_grad(ctx: FileContext, expr: ast.expr) -> bool:
    """Whether a class the model ``expr`` may be built from turns autograd off inside its own
    ``forward`` (a ``no_grad``/``inference_mode`` block or decorator): what a call of it records
    then depends on its arguments, which the caller's file does not tell."""
    found = model_classes(ctx, expr)
    if not found:
        return False
    for module, cls in found:
        forward = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "forward"), None)
        if forward is None:
            continue
        if any(decorator_switch(module, d) is False for d in forward.decorator_list):
            return True
        for node in ast.walk(forward):
            if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                grad_switch(module, item.context_expr) is False for item in node.items
            ):
                return True
    return False
