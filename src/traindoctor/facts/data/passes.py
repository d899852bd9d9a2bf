"""What one read of a loader's value does, and what one loop over it does: the syntax-level
questions of the loader analysis (:mod:`traindoctor.facts.data.static`) that need no value flow.

``len(loader)`` or ``loader.sampler`` neither iterates the loader nor hands it on; ``for i, _ in
enumerate(loader)`` never reads its batches (a loader benchmark); a loop that runs its model under
``no_grad`` and steps no optimizer extracts features; ``it = iter(loader)`` is one pass however
many loops then draw from ``it``."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from traindoctor.facts.data.training import callee_name, under_no_grad

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: Builtins that read a value without iterating it or handing it on.
INERT_CALLS = frozenset({"len", "print", "isinstance", "hasattr", "getattr", "type", "id", "repr", "str", "format"})


def inert_read(ctx: FileContext, node: ast.AST) -> bool:
    """``len(loader)``, ``print(loader)``, ``loader.sampler``, ``loader.dataset``: a read of the
    value that neither iterates it nor hands it on (an attribute is not the loader)."""
    parent = ctx.parent(node)
    if isinstance(parent, ast.Attribute) and parent.value is node:
        return not parent.attr.startswith("__")  # ``loader.__iter__()`` is a pass
    if isinstance(parent, ast.Call) and node in parent.args and isinstance(parent.func, ast.Name):
        name = parent.func.id
        return name in INERT_CALLS and name not in ctx.imports.names and not ctx.bindings_of(parent.func)
    return False


def forwards_without_grad(ctx: FileContext, loop: ast.For | ast.AsyncFor) -> bool:
    """A loop (with no ``backward()`` in it) whose body runs its model under ``no_grad`` and
    steps no optimizer: it extracts features or computes statistics, it does not train."""
    if any(ctx.within(c, loop) for c in ctx.method_calls("step")):
        return False
    for node in ctx.walk(loop):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            if any(under_no_grad(ctx, stmt) for stmt in node.body[:1]):
                return True
    return False


def is_iter_call(call: ast.Call) -> bool:
    return isinstance(call.func, ast.Name) and call.func.id == "iter" and len(call.args) == 1


def index_of(node: ast.Subscript) -> int | str | None:
    """The constant index or key of ``x[0]`` / ``x["train"]``."""
    key = node.slice
    if isinstance(key, ast.Constant) and isinstance(key.value, (int, str)) and not isinstance(key.value, bool):
        return key.value
    return None


def batches_unused(ctx: FileContext, loop: ast.For | ast.AsyncFor) -> bool:
    """Whether a ``for`` loop over a loader never reads the batch it binds (``for _ in loader``,
    ``for i, _ in enumerate(loader)``, a name bound but never read in the body)."""
    target: ast.expr = loop.target
    it = loop.iter
    if isinstance(it, ast.Call) and callee_name(it) == "enumerate":
        if not (isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2):
            return False
        target = target.elts[1]
    elif isinstance(it, ast.Call) and callee_name(it) in ("zip", "chain"):
        return False  # several iterables: which name is the loader's batch cannot be told
    names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    if not names or any(isinstance(n, (ast.Attribute, ast.Subscript, ast.Starred)) for n in ast.walk(target)):
        return False
    if names <= {"_"}:
        return True
    for stmt in [*loop.body, *loop.orelse]:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Name) and sub.id in names and isinstance(sub.ctx, ast.Load):
                return False
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                return False  # a closure may read the batch later: cannot tell
    return True
