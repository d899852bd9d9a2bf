"""Values a helper computes when one call site runs it: what a call site passes, followed into the
callee. ``build_optimizer(model, args)`` in ``optim.py`` builds
``torch.optim.SGD(model.parameters(), weight_decay=args.weight_decay)``: in ``optim.py`` alone the
decay is unknown (``args`` is a parameter), at the call ``build_optimizer(net, args)`` of
``train.py`` it is the caller's ``--weight-decay`` default.

:func:`value_at` evaluates an expression of the callee with its parameters bound to what the call
passes (by keyword, by position, in a spelled-out ``*args`` tuple; a parameter's own default when
nothing is passed): a parameter, an attribute path read from a parameter (``args.weight_decay``,
``cfg.SOLVER.WEIGHT_DECAY``), a local name of the callee bound to either. Unknown stays unknown.
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traindoctor.static.args import UNKNOWN

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.callees import FuncDef
    from traindoctor.static.context import FileContext

_DEPTH = 6


@dataclass(frozen=True)
class CallSite:
    """One call (in ``caller``) of the function ``fn`` (defined in ``callee``)."""

    caller: FileContext
    call: ast.Call
    callee: FileContext
    fn: FuncDef

    def parameters(self) -> list[str]:
        a = self.fn.args
        return [p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]]

    def argument(self, param: str) -> ast.expr | None:
        """What the call passes for ``param`` (None: nothing, or it cannot be told)."""
        from traindoctor.static.callees import argument_for

        return argument_for(self.caller, self.fn, self.call, param)

    def default(self, param: str) -> ast.expr | None:
        a = self.fn.args
        positional = [*a.posonlyargs, *a.args]
        for p, d in zip(reversed(positional), reversed(a.defaults)):
            if p.arg == param:
                return d
        for p, kd in zip(a.kwonlyargs, a.kw_defaults):
            if p.arg == param:
                return kd
        return None


def value_at(site: CallSite, expr: ast.AST | None, depth: int = 0) -> Any:
    """The value of the callee's ``expr`` when ``site`` runs it, else UNKNOWN."""
    if expr is None or depth > _DEPTH:
        return UNKNOWN
    callee = site.callee
    own = callee.value(expr)
    if own is not UNKNOWN:
        return own
    params = site.parameters()
    if isinstance(expr, ast.Name):
        if expr.id in params:
            if _rebound(site.fn, expr.id):
                return UNKNOWN
            passed = site.argument(expr.id)
            if passed is not None:
                return site.caller.value(passed)
            default = site.default(expr.id)
            return callee.value(default) if default is not None else UNKNOWN
        bound = callee.bindings_of(expr)
        if not bound or any(b is None for b in bound):
            return UNKNOWN
        values = [value_at(site, b, depth + 1) for b in bound if b is not None]
        first = values[0]
        if any(v is UNKNOWN for v in values) or any(v != first or type(v) is not type(first) for v in values):
            return UNKNOWN
        return first
    if isinstance(expr, ast.Attribute):
        path: list[str] = []
        root: ast.AST = expr
        while isinstance(root, ast.Attribute):
            path.append(root.attr)
            root = root.value
        if not (isinstance(root, ast.Name) and root.id in params) or _rebound(site.fn, root.id):
            return UNKNOWN
        passed = site.argument(root.id)
        if not isinstance(passed, ast.Name):
            return UNKNOWN
        return site.caller.value(_read_path(site, passed, path))
    return UNKNOWN


def expression_at(site: CallSite, expr: ast.AST | None, depth: int = 0) -> ast.expr | None:
    """The caller's expression the callee's ``expr`` stands for at ``site`` (a parameter: what
    the call passes; ``args.lr`` of a parameter ``args``: the caller's ``args.lr``; a local of the
    callee bound once to either), else None."""
    if expr is None or depth > _DEPTH:
        return None
    params = site.parameters()
    if isinstance(expr, ast.Name):
        if expr.id in params:
            return None if _rebound(site.fn, expr.id) else site.argument(expr.id)
        bound = site.callee.binding(expr)
        return expression_at(site, bound, depth + 1) if bound is not None else None
    if isinstance(expr, ast.Attribute):
        path: list[str] = []
        root: ast.AST = expr
        while isinstance(root, ast.Attribute):
            path.append(root.attr)
            root = root.value
        if not (isinstance(root, ast.Name) and root.id in params) or _rebound(site.fn, root.id):
            return None
        passed = site.argument(root.id)
        return _read_path(site, passed, path) if isinstance(passed, ast.Name) else None
    return None


def _read_path(site: CallSite, passed: ast.Name, path: list[str]) -> ast.Attribute:
    """``passed.a.b`` as a read of the caller's file, placed at the call (so that the caller's
    look-ups, such as an argparse namespace handed in as a parameter, see where it is read)."""
    node: ast.expr = ast.Name(id=passed.id, ctx=ast.Load())
    parents = site.caller.parents
    nodes = [node]
    for attr in reversed(path):
        node = ast.Attribute(value=node, attr=attr, ctx=ast.Load())
        nodes.append(node)
    for inner, outer in itertools.pairwise(nodes):
        parents[inner] = outer
    parents[nodes[-1]] = site.call
    for n in nodes:
        ast.copy_location(n, passed)
    assert isinstance(node, ast.Attribute)
    return node


def _rebound(fn: FuncDef, name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store) for n in ast.walk(fn))
