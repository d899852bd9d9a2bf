"""Simple constant propagation inside one file.

What rules may rely on: literals, unary/binary arithmetic on known values, names bound exactly
once (or always to the same value) in the enclosing function or at module level, ``int()``/
``float()``/``min()``/``max()`` of known values, conditional expressions whose branches agree, and
argparse defaults read back through ``args.x`` (and a LightningModule's ``__init__`` defaults read back
through ``self.x``: ``ctx.framework_value``, see :func:`traindoctor.facts.frameworks.static.lightning_hparam`).
Everything else is :data:`UNKNOWN`: rules must not guess.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

from traindoctor.static.args import UNKNOWN
from traindoctor.static.protocols import ValueSource

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
#: Builtins whose result a constant argument list determines (called on the evaluated arguments).
_SAFE_CALLS: dict[str, Callable[..., Any]] = {
    "int": int,
    "float": float,
    "min": min,
    "max": max,
    "abs": abs,
    "bool": bool,
}
_MAX_DEPTH = 12


def evaluate(ctx: ValueSource, node: ast.AST | None, depth: int = 0) -> Any:
    """The value of ``node`` if the file alone determines it, else UNKNOWN."""
    if node is None or depth > _MAX_DEPTH:
        return UNKNOWN
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp):
        v = evaluate(ctx, node.operand, depth + 1)
        if v is UNKNOWN:
            return UNKNOWN
        try:
            if isinstance(node.op, ast.USub):
                return -v
            if isinstance(node.op, ast.UAdd):
                return +v
            if isinstance(node.op, ast.Not):
                return not v
        except TypeError:
            return UNKNOWN
        return UNKNOWN
    if isinstance(node, ast.BinOp):
        op = _BINOPS.get(type(node.op))
        if op is None:
            return UNKNOWN
        a = evaluate(ctx, node.left, depth + 1)
        b = evaluate(ctx, node.right, depth + 1)
        if a is UNKNOWN or b is UNKNOWN:
            return UNKNOWN
        try:
            if isinstance(node.op, ast.Pow) and abs(b) > 64:
                return UNKNOWN
            return op(a, b)
        except Exception:
            return UNKNOWN
    if isinstance(node, (ast.Tuple, ast.List)):
        items = [evaluate(ctx, e, depth + 1) for e in node.elts]
        if any(i is UNKNOWN for i in items):
            return UNKNOWN
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.IfExp):
        test = evaluate(ctx, node.test, depth + 1)
        if test is not UNKNOWN:
            return evaluate(ctx, node.body if test else node.orelse, depth + 1)
        a = evaluate(ctx, node.body, depth + 1)
        b = evaluate(ctx, node.orelse, depth + 1)
        return a if a is not UNKNOWN and a == b and type(a) is type(b) else UNKNOWN
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        fn = _SAFE_CALLS.get(node.func.id)
        if fn is None or node.keywords or node.func.id in ctx.imports.names:
            return UNKNOWN
        args = [evaluate(ctx, a, depth + 1) for a in node.args]
        if any(a is UNKNOWN for a in args) or not args:
            return UNKNOWN
        try:
            return fn(*args)
        except Exception:
            return UNKNOWN
    if isinstance(node, ast.Name):
        bound = ctx.bindings_of(node)
        if bound is None or not bound:
            return UNKNOWN
        values = []
        for expr in bound:
            if expr is None:
                return UNKNOWN
            v = evaluate(ctx, expr, depth + 1)
            if v is UNKNOWN:
                return UNKNOWN
            values.append(v)
        first = values[0]
        if all(v == first and type(v) is type(first) for v in values[1:]):
            return first
        return UNKNOWN
    if isinstance(node, ast.Attribute):
        value = ctx.argparse_default(node) if isinstance(node.value, ast.Name) else UNKNOWN
        if value is UNKNOWN:
            value = ctx.framework_value(node)  # ``self.lr`` of a LightningModule: its ``__init__`` default
        if value is not UNKNOWN:
            return value
    if isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        return ctx.outside_value(node)  # e.g. ``cfg.train.batch_size`` read from a config file
    return UNKNOWN


def option_dest(call: ast.Call) -> str | None:
    """The ``dest`` argparse derives for an ``add_argument`` call."""
    for kw in call.keywords:
        if kw.arg == "dest" and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    names = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not names:
        return None
    longs = [n for n in names if n.startswith("--")]
    if longs:
        return longs[0][2:].replace("-", "_")
    shorts = [n for n in names if n.startswith("-")]
    if shorts:
        return shorts[0].lstrip("-").replace("-", "_")
    return names[0]


def option_default(ctx: ValueSource, call: ast.Call) -> Any:
    """The default an ``add_argument`` call gives its option, after argparse's type conversion."""
    kws = {kw.arg: kw.value for kw in call.keywords if kw.arg}
    action = evaluate(ctx, kws["action"]) if "action" in kws else None
    if "default" in kws:
        value = evaluate(ctx, kws["default"])
    elif action == "store_true":
        value = False
    elif action == "store_false":
        value = True
    else:
        value = None
    if isinstance(value, str) and "type" in kws and isinstance(kws["type"], ast.Name):
        conv = {"int": int, "float": float}.get(kws["type"].id)
        if conv is not None:
            try:
                value = conv(value)
            except ValueError:
                return UNKNOWN
    return value
