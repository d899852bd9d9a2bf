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
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traindoctor.static.args import UNKNOWN

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.finding import Related
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
        read = _parameter_path(site, expr, params)
        return site.caller.value(read) if read is not None else UNKNOWN
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
        return _parameter_path(site, expr, params)
    return None


def _parameter_path(site: CallSite, expr: ast.Attribute, params: list[str]) -> ast.Attribute | None:
    """``args.optim.lr`` of the callee's parameter ``args`` as the caller's expression (the same
    attribute path read off the name the call passes); None when the root is no parameter, is
    rebound, or the call passes no plain name."""
    path: list[str] = []
    root: ast.AST = expr
    while isinstance(root, ast.Attribute):
        path.append(root.attr)
        root = root.value
    if not (isinstance(root, ast.Name) and root.id in params) or _rebound(site.fn, root.id):
        return None
    passed = site.argument(root.id)
    return _read_path(site, passed, path) if isinstance(passed, ast.Name) else None


def helper_optimizers(ctx: FileContext) -> Iterator[tuple[CallSite, Any]]:
    """(the call site, the optimizer construction) for each call of this file to a function (of
    this file or of a project module) that builds an optimizer in its own body, the optimizers
    in source order: ``build_optimizer(model, args)`` whose settings come from this call."""
    from traindoctor.facts.optim.static import optimizer_calls
    from traindoctor.static.callees import function_definition

    for call in ctx.of(ast.Call):
        if not isinstance(call.func, (ast.Name, ast.Attribute)) or not (call.args or call.keywords):
            continue
        found = function_definition(ctx, call)
        if found is None:
            continue
        callee, fn = found
        site = CallSite(ctx, call, callee, fn)
        for opt in optimizer_calls(callee):
            if callee.function_of(opt.call) is fn:
                yield site, opt


def related_in_callee(site: CallSite, node: ast.AST, message: str) -> tuple[Related, ...]:
    """``node`` of the callee as the related location of a finding at ``site``'s call."""
    from traindoctor.finding import Related
    from traindoctor.static.project import place_of

    ctx = site.caller
    if site.callee is ctx:
        return (Related(ctx.filename, ctx.location(node), message),)
    related: tuple[Related, ...] = ctx.project.related(place_of(site.callee, node), message)
    return related


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
