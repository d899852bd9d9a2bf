"""Where autograd is off in a file (``no_grad`` / ``inference_mode`` regions, decorated functions,
``set_grad_enabled(False)``), the call sites of a helper, and the file's backward passes."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from traindoctor.static.names import receiver

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

_NO_GRAD = frozenset(
    (
        "torch.no_grad",
        "torch.inference_mode",
        "torch.autograd.no_grad",
        "torch.autograd.inference_mode",
        "torch.autograd.grad_mode.inference_mode",
    )
)
_ENABLE_GRAD = frozenset(("torch.enable_grad", "torch.autograd.enable_grad"))
_SET_GRAD = frozenset(
    (
        "torch.set_grad_enabled",
        "torch.autograd.set_grad_enabled",
        "torch.autograd.grad_mode.set_grad_enabled",
    )
)
_BACKWARD_FUNCS = ("torch.autograd.grad", "torch.autograd.backward")
BACKWARD_METHODS = ("backward", "manual_backward")
FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def grad_switch(ctx: FileContext, expr: ast.AST) -> bool | None:
    """False for an expression that turns autograd off, True for one that turns it on, else None."""
    target = expr.func if isinstance(expr, ast.Call) else expr
    qn = ctx.qualname(target)
    if qn in _NO_GRAD:
        if isinstance(expr, ast.Call) and qn.endswith("inference_mode") and expr.args:
            return None if ctx.value(expr.args[0]) is not True else False
        return False
    if qn in _ENABLE_GRAD:
        return True
    if qn in _SET_GRAD and isinstance(expr, ast.Call) and expr.args:
        value = ctx.value(expr.args[0])
        if value is True or value is False:
            return value
    return None


def decorator_switch(ctx: FileContext, deco: ast.expr) -> bool | None:
    """What a decorator does to autograd (:func:`grad_switch`), a project's own decorator
    included: ``@nograd`` where ``def nograd(f)`` returns a wrapper that calls ``f`` inside
    ``with torch.no_grad():`` is False."""
    state = grad_switch(ctx, deco)
    if state is not None or not isinstance(deco, (ast.Name, ast.Attribute)):
        return state
    return ctx.shared(f"evaluation.decorator_switch.{ast.dump(deco)}", lambda c: _project_decorator(c, deco))


def _project_decorator(ctx: FileContext, deco: ast.Name | ast.Attribute) -> bool | None:
    """False when ``deco`` names a top-level function of this file or of another project module
    that wraps the function it decorates in a no_grad/inference_mode region."""
    if isinstance(deco, ast.Name) and deco.id not in ctx.imports.names:
        local = [
            s for s in ctx.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == deco.id
        ]
        return False if len(local) == 1 and wraps_in_no_grad(ctx, local[0]) else None
    view = ctx.project
    resolved = view.resolve(deco) if view is not None and view.imports_project else None
    if resolved is None or resolved.function is None or resolved.summary is None or resolved.project is None:
        return None
    other = resolved.project.module_context(resolved.summary)
    if other is None:
        return None
    found = [
        s for s in other.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == resolved.name
    ]
    return False if len(found) == 1 and wraps_in_no_grad(other, found[0]) else None


def wraps_in_no_grad(ctx: FileContext, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether the decorator ``fn`` returns a function that calls its first parameter with autograd
    off: an inner ``def wrapper(*a, **k)`` calling it inside ``with torch.no_grad():`` (or itself
    decorated so), or ``return torch.no_grad()(f)``."""
    params = [p.arg for p in [*fn.args.posonlyargs, *fn.args.args]]
    if not params:
        return False
    wrapped = params[0]
    inner = {s.name: s for s in fn.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for ret in (n for n in ast.walk(fn) if isinstance(n, ast.Return) and n.value is not None):
        value = ret.value
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Call) and grad_switch(ctx, value.func) is False:
            if any(isinstance(a, ast.Name) and a.id == wrapped for a in value.args):
                return True
        if isinstance(value, ast.Name) and value.id in inner:
            wrapper = inner[value.id]
            calls = [
                c
                for c in ast.walk(wrapper)
                if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id == wrapped
            ]
            if calls and all(grad_enabled_at(ctx, c) is False for c in calls):
                return True
    return False


def grad_enabled_at(ctx: FileContext, node: ast.AST) -> bool | None:
    """Whether autograd is on at ``node`` as far as its own function tells; None when silent.

    Looks at enclosing ``with`` blocks and, at the function boundary, at its decorators; it does
    not look past the function (callers are :func:`callers_disable_grad`'s business).
    """
    for anc in ctx.ancestors(node):
        if isinstance(anc, (ast.With, ast.AsyncWith)):
            for item in anc.items:
                state = grad_switch(ctx, item.context_expr)
                if state is not None:
                    return state
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in anc.decorator_list:
                state = decorator_switch(ctx, deco)
                if state is not None:
                    return state
            return None
        if isinstance(anc, ast.Lambda):
            return None
    return None


def grad_disabled_globally(ctx: FileContext) -> bool:
    """A bare ``torch.set_grad_enabled(False)`` statement anywhere in the file."""
    for qn in _SET_GRAD:
        for call in ctx.calls_to(qn):
            if isinstance(ctx.parent(call), ast.Expr) and call.args and ctx.value(call.args[0]) is False:
                return True
    return False


def call_sites(ctx: FileContext, fn: ast.AST) -> list[ast.Call]:
    """Calls in the file of the function ``fn`` by its name (``evaluate(...)``, ``self.evaluate(...)``)."""
    name = getattr(fn, "name", None)
    if not name:
        return []
    out = [c for c in ctx.method_calls(name) if isinstance(r := receiver(c), ast.Name) and r.id == "self"]
    out += [c for c in ctx.of(ast.Call) if isinstance(c.func, ast.Name) and c.func.id == name]
    out.sort(key=lambda c: (c.lineno, c.col_offset))
    return out


def callers_disable_grad(ctx: FileContext, fn: ast.AST | None) -> bool:
    """Whether any call site of ``fn`` in the file runs under no_grad (one level up)."""
    if fn is None:
        return False
    return any(grad_enabled_at(ctx, c) is False for c in call_sites(ctx, fn))


def same_function(ctx: FileContext, node: ast.AST, fn: ast.AST | None) -> bool:
    return ctx.function_of(node) is fn


def backward_calls(ctx: FileContext, fn: ast.AST | None) -> list[ast.Call]:
    """Backward passes in the body of ``fn`` (None: module level), nested functions excluded."""
    return list(ctx.shared("evaluation.backward_calls", _backward_calls_by_function).get(fn, ()))


def self_test(ctx: FileContext, node: ast.AST) -> bool:
    """Whether ``node`` runs in the ``if __name__ == "__main__":`` block of a file that never
    calls ``backward()``: a model module's smoke test (one forward on a random tensor to print
    shapes or FLOPs), not an evaluation whose autograd recording costs anything."""
    if any(ctx.shared("evaluation.backward_calls", _backward_calls_by_function).values()):
        return False
    for anc in ctx.ancestors(node):
        if isinstance(anc, ast.If) and _is_main_guard(anc.test):
            return True
    return False


def _is_main_guard(test: ast.expr) -> bool:
    """``__name__ == "__main__"`` (either side)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides) and any(
        isinstance(x, ast.Constant) and x.value == "__main__" for x in sides
    )


def _backward_calls_by_function(ctx: FileContext) -> dict[ast.AST | None, list[ast.Call]]:
    """The file's backward passes filed by the function whose own body makes them, in source order
    (a call both methods and functions name, ``torch.autograd.backward(...)``, is listed twice)."""
    table: dict[ast.AST | None, list[ast.Call]] = {}
    calls = [c for attr in BACKWARD_METHODS for c in ctx.method_calls(attr)]
    for call in [*calls, *ctx.calls_to(*_BACKWARD_FUNCS)]:
        table.setdefault(ctx.function_of(call), []).append(call)
    for found in table.values():
        found.sort(key=lambda c: (c.lineno, c.col_offset))
    return table
