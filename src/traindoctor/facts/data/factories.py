"""What a project function hands back to its caller: the DataLoaders it returns (built by itself or
by a function it calls) and the shuffling ``DistributedSampler`` it returns.

Real projects build loaders through layers of helpers: ``construct_train_loader()`` returns
``_construct_loader(split=..., shuffle=True)``, which builds the DataLoader; ``get_data_loaders(...)``
appends its loader to a list and returns the list; ``create_sampler(ds, cfg)`` returns
``DistributedSampler(ds) if cfg.NUM_GPUS > 1 else None``. The facts of the innermost construction
travel up through each call, with the callee's parameters bound to what the call passes (a
constant, the caller's own parameter, the callee's default); anything else stays unknown. A
return that gives something other than a loader (``return ffcv.Loader(...)`` in another branch)
is left out: the loader facts describe the branches that do build a DataLoader. A dispatch on a
parameter whose arms return values of different shapes (``if is_pretrain: return a(cfg)`` /
``else: return b(cfg)``) keeps each arm's returns apart, and a call that passes a constant for
the parameter takes its arm (:meth:`Returns.switched`).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from traindoctor.facts.data.names import is_evaluation_name
from traindoctor.facts.data.project import LoaderFacts, function_data, switched_returns
from traindoctor.static.args import MISSING, UNKNOWN, find_arg
from traindoctor.static.project import parameter_defaults, place_of

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import FuncDef, FunctionFacts, Place

DATALOADER = "torch.utils.data.DataLoader"
DISTRIBUTED_SAMPLER = "torch.utils.data.DistributedSampler"
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
#: How many calls deep a returned value is followed (wrapper of a wrapper of a factory).
_MAX_DEPTH = 4
#: ``(index or None, facts)``: a loader the function returns, as the value itself or as element
#: ``index`` of a returned tuple or list (an int) or dict (a str key).
Entry = tuple[int | str | None, LoaderFacts]
#: A construction's facts, computed by the summariser for one ``DataLoader(...)`` call.
FactsOf = Any  # Callable[[FileContext, ast.Call, set[str]], LoaderFacts]; Any keeps mypy simple


@dataclass(frozen=True)
class Signature:
    """What binding a call's arguments to a callee's parameters needs."""

    positional: tuple[str, ...]
    names: frozenset[str]
    defaults: Mapping[str, Any]


def signature_of(ctx: FileContext, fn: FuncDef) -> Signature:
    a = fn.args
    positional = tuple(p.arg for p in [*a.posonlyargs, *a.args])
    names = frozenset([*positional, *(p.arg for p in a.kwonlyargs)])
    return Signature(positional, names, parameter_defaults(ctx, fn))


def facts_signature(fn: FunctionFacts) -> Signature:
    """The :class:`Signature` of a project function from its summary."""
    return Signature(fn.positional, frozenset((*fn.positional, *fn.keyword_only)), fn.defaults)


def passed_value(ctx: FileContext, call: ast.Call, sig: Signature, param: str) -> Any:
    """The constant ``call`` passes for ``param`` (its default when not passed), else UNKNOWN."""
    node = find_arg(call, param, sig.positional, ctx)
    if node is MISSING:
        return sig.defaults.get(param, UNKNOWN)
    if node is UNKNOWN:
        return UNKNOWN
    return ctx.value(node)


class Returns:
    """The returned loaders and samplers of a module's functions, memoised per module context."""

    def __init__(self, ctx: FileContext, facts_of: FactsOf) -> None:
        self.ctx = ctx
        self.facts_of = facts_of
        self._loaders: dict[int, tuple[Entry, ...]] = {}
        self._samplers: dict[int, Place | None] = {}
        self._busy: set[int] = set()
        self._defs: dict[str, FuncDef] | None = None

    # ------------------------------------------------------------------ loaders
    def loaders(self, fn: FuncDef, depth: int = 0) -> tuple[Entry, ...]:
        """Every DataLoader construction ``fn`` may return (see the module docs)."""
        key = id(fn)
        if key in self._loaders:
            return self._loaders[key]
        if key in self._busy or depth > _MAX_DEPTH:
            return ()  # a cycle, or too deep: unknown
        self._busy.add(key)
        try:
            found = self._loaders_of(fn, depth)
        finally:
            self._busy.discard(key)
        self._loaders[key] = found
        return found

    def _loaders_of(self, fn: FuncDef, depth: int) -> tuple[Entry, ...]:
        return self._collect(fn, self._returns(fn), depth)

    def switched(self, fn: FuncDef, depth: int = 0) -> tuple[str, tuple[Entry, ...], tuple[Entry, ...]] | None:
        """A dispatch on a parameter at the top of ``fn``'s body (``if is_pretrain: return
        a(cfg)`` then ``return b(cfg)``, or an ``else`` arm): each arm's returns, collected apart
        (see :attr:`FunctionData.switched`); None when ``fn`` has no such dispatch or neither
        arm returns a loader."""
        ctx = self.ctx
        params = set(signature_of(ctx, fn).names)
        returns = self._returns(fn)
        for stmt in fn.body:
            if not isinstance(stmt, ast.If):
                if any(ctx.within(r, stmt) for r in returns):
                    return None  # a return before the dispatch
                continue
            test, negated = stmt.test, False
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                test, negated = test.operand, True
            if not (isinstance(test, ast.Name) and test.id in params) or not stmt.body:
                return None
            if not isinstance(stmt.body[-1], ast.Return):
                return None  # the true arm may fall through to the code after the if
            then = [r for r in returns if any(ctx.within(r, s) for s in stmt.body)]
            rest = [r for r in returns if r not in then]
            truthy = self._collect(fn, then, depth)
            falsy = self._collect(fn, rest, depth)
            if not (truthy or falsy):
                return None
            return (test.id, falsy, truthy) if negated else (test.id, truthy, falsy)
        return None

    def _collect(self, fn: FuncDef, returns: list[ast.Return], depth: int) -> tuple[Entry, ...]:
        ctx = self.ctx
        params = set(signature_of(ctx, fn).names)
        found: dict[tuple[int | str | None, int], Entry] = {}
        # The shape of the returns: "?" before the first, None for plain values, the indices or
        # keys of a returned container ("*" for one forwarded from a callee, shape unknown).
        shape: object = "?"
        for ret in returns:
            value = cast(ast.expr, ret.value)
            elements = self._elements(value)
            if elements is not None:
                keys = tuple(k for k, _ in elements)
                if shape not in ("?", "*", keys):
                    return ()
                shape = keys
                for key, elt in elements:
                    for facts in self._plain(elt, params, depth) or ():
                        found.setdefault((key, id(facts)), (key, facts))
                continue
            entries = self._value(value, params, depth)
            if not entries:
                continue  # returns something else in this branch
            indexed = entries[0][0] is not None
            if (indexed and shape is None) or (not indexed and shape is not None and shape != "?"):
                return ()
            shape = ("*" if shape == "?" else shape) if indexed else None
            for index, facts in entries:
                found.setdefault((index, id(facts)), (index, facts))
        entries_out = tuple(found.values())
        if is_evaluation_name(fn.name):
            entries_out = tuple((i, replace(f, evaluation=True)) for i, f in entries_out)
        return entries_out

    def _returns(self, fn: FuncDef) -> list[ast.Return]:
        ctx = self.ctx
        return [
            r for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None and ctx.function_of(r) is fn
        ]

    def _elements(self, value: ast.expr) -> list[tuple[int | str, ast.expr]] | None:
        """The (index or key, element) pairs of a returned container: a tuple, list or dict
        literal (constant string keys), or a list name bound once to ``[]`` and filled by
        ``append`` statements of the function body (``loaders.append(train_loader)``)."""
        if isinstance(value, (ast.Tuple, ast.List)):
            if any(isinstance(e, ast.Starred) for e in value.elts):
                return None
            return list(enumerate(value.elts))
        if isinstance(value, ast.Dict):
            pairs: list[tuple[int | str, ast.expr]] = []
            for k, v in zip(value.keys, value.values):
                if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
                    return None
                pairs.append((k.value, v))
            return pairs
        if isinstance(value, ast.Name):
            appended = self._appended(value)
            return list(enumerate(appended)) if appended is not None else None
        return None

    def _appended(self, name: ast.Name) -> list[ast.expr] | None:
        ctx = self.ctx
        bound = ctx.bindings_of(name)
        if not bound or len(bound) != 1 or not (isinstance(bound[0], ast.List) and not bound[0].elts):
            return None
        fn = ctx.function_of(name)
        if not isinstance(fn, _FUNCS):
            return None
        appended: list[ast.expr] = []
        for ref in ctx.names_by_id.get(name.id, ()):
            if ref is name or not ctx.within(ref, fn) or not isinstance(ref.ctx, ast.Load):
                continue
            attr = ctx.parent(ref)
            call = ctx.parent(attr) if isinstance(attr, ast.Attribute) else None
            stmt = ctx.parent(call) if isinstance(call, ast.Call) else None
            if not (
                isinstance(attr, ast.Attribute)
                and attr.attr == "append"
                and isinstance(call, ast.Call)
                and len(call.args) == 1
                and not call.keywords
                and isinstance(stmt, ast.Expr)
                and ctx.parent(stmt) is fn  # straight-line: not in a loop or a branch
            ):
                return None  # read or changed some other way: the elements cannot be told
            appended.append(call.args[0])
        return appended or None

    def _plain(self, value: ast.expr, params: set[str], depth: int) -> list[LoaderFacts] | None:
        """The loaders ``value`` (one element, or a plain return) may be; None when it may be
        something else."""
        entries = self._value(value, params, depth)
        if not entries or any(i is not None for i, _ in entries):
            return None
        return [f for _, f in entries]

    def _value(self, value: ast.expr, params: set[str], depth: int) -> list[Entry] | None:
        """The loader entries an expression evaluates to: a construction (or ``None`` in the other
        branch of a conditional expression), a name every binding of which is one, or a call of a
        project function that returns loaders."""
        ctx = self.ctx
        if isinstance(value, ast.Call):
            if ctx.qualname(value.func) == DATALOADER:
                return [(None, self.facts_of(ctx, value, params))]
            return self._called(value, params, depth)
        if isinstance(value, ast.IfExp):  # ``DataLoader(...) if dataset is not None else None``
            out: list[Entry] = []
            for branch in (value.body, value.orelse):
                if isinstance(branch, ast.Constant) and branch.value is None:
                    continue  # no loader at all on this path
                entries = self._value(branch, params, depth)
                if not entries:
                    return None
                out += entries
            return out or None
        if isinstance(value, ast.Name):
            bound = ctx.bindings_of(value)
            if not bound or any(not isinstance(b, (ast.Call, ast.IfExp)) for b in bound):
                return None
            out = []
            for b in bound:
                entries = self._value(cast(ast.expr, b), params, depth)
                if not entries:
                    return None  # one binding is something else: not a plain factory
                out += entries
            return out
        return None

    def _called(self, call: ast.Call, params: set[str], depth: int) -> list[Entry] | None:
        """Loaders returned by a function ``call`` invokes (same module or project), with the
        callee's parameters bound to the call's arguments."""
        local = self._local_def(call)
        if local is not None:
            entries = self.loaders(local, depth + 1)
            sig = signature_of(self.ctx, local)
            if not entries and (switch := self.switched(local, depth + 1)) is not None:
                param, truthy, falsy = switch
                value = passed_value(self.ctx, call, sig, param)
                entries = () if value is UNKNOWN else truthy if value else falsy
        else:
            view = self.ctx.project
            resolved = view.resolve(call.func) if view is not None else None
            fn = resolved.function if resolved is not None else None
            data = function_data(fn)
            if fn is None or data is None:
                return None
            sig = facts_signature(fn)
            entries = data.returns
            if not entries and data.loader is not None:
                entries = ((None, data.loader),)
            if not entries:
                entries = switched_returns(data, lambda p: passed_value(self.ctx, call, sig, p))
        if not entries:
            return None
        return [(i, self._bind(f, call, sig, params)) for i, f in entries]

    def _local_def(self, call: ast.Call) -> FuncDef | None:
        """The top-level function of this module a plain-name call invokes."""
        ctx = self.ctx
        func = call.func
        if not isinstance(func, ast.Name) or func.id in ctx.imports.names or ctx.bindings_of(func):
            return None
        if self._defs is None:
            self._defs = {s.name: s for s in ctx.tree.body if isinstance(s, _FUNCS)}
        return self._defs.get(func.id)

    def _bind(self, facts: LoaderFacts, call: ast.Call, sig: Signature, params: set[str]) -> LoaderFacts:
        """``facts`` of a callee's loader as seen from the caller: its parameters replaced by the
        arguments ``call`` passes (or by their defaults)."""
        keywords: dict[str, tuple[str, Any]] = {}
        for name, (kind, value) in facts.keywords.items():
            keywords[name] = self._bound(kind, value, call, sig, params) if kind == "param" else (kind, value)
        sampler = facts.distributed_sampler
        given = facts.keywords.get("sampler")
        if sampler is None and given is not None and given[0] == "param":
            node = find_arg(call, given[1], sig.positional, self.ctx)
            if isinstance(node, ast.expr):
                sampler = self.sampler_place(node)
        return replace(facts, keywords=keywords, distributed_sampler=sampler)

    def _bound(self, kind: str, param: str, call: ast.Call, sig: Signature, params: set[str]) -> tuple[str, Any]:
        ctx = self.ctx
        node = find_arg(call, param, sig.positional, ctx)
        if node is MISSING:
            default = sig.defaults.get(param, UNKNOWN)
            return ("unknown", None) if default is UNKNOWN else ("value", default)
        if node is UNKNOWN:
            return ("unknown", None)
        if isinstance(node, ast.Name) and node.id in params and ctx.bindings_of(node) == [None]:
            return ("param", node.id)
        value = ctx.value(node)
        return ("unknown", None) if value is UNKNOWN else ("value", value)

    # ------------------------------------------------------------------ samplers
    def sampler(self, fn: FuncDef, depth: int = 0) -> Place | None:
        """Where the shuffling ``DistributedSampler`` that ``fn`` returns is built (None: it
        returns none, or it cannot be told)."""
        key = id(fn)
        if key in self._samplers:
            return self._samplers[key]
        if key in self._busy or depth > _MAX_DEPTH:
            return None
        self._busy.add(key)
        try:
            found = None
            for ret in self._returns(fn):
                found = self.sampler_place(cast(ast.expr, ret.value), depth)
                if found is not None:
                    break
        finally:
            self._busy.discard(key)
        self._samplers[key] = found
        return found

    def sampler_place(self, node: ast.expr, depth: int = 0, hops: int = 0) -> Place | None:
        """Where the shuffling ``DistributedSampler`` ``node`` may evaluate to is built: the
        construction, ``s if dist else None``, a name bound to one, a helper that returns one."""
        ctx = self.ctx
        if hops > 8:
            return None  # ``x = a if c else x``: a chain of names that loops
        if isinstance(node, ast.IfExp):
            return self.sampler_place(node.body, depth, hops + 1) or self.sampler_place(node.orelse, depth, hops + 1)
        if isinstance(node, ast.Name):
            for b in ctx.bindings_of(node) or ():
                found = self.sampler_place(b, depth, hops + 1) if b is not None and b is not node else None
                if found is not None:
                    return found
            return None
        if not isinstance(node, ast.Call):
            return None
        if ctx.qualname(node.func) == DISTRIBUTED_SAMPLER:
            if ctx.arg_value(node, "shuffle", default=True) is True:
                return place_of(ctx, node)
            return None
        local = self._local_def(node)
        if local is not None:
            return self.sampler(local, depth + 1)
        view = ctx.project
        resolved = view.resolve(node.func) if view is not None else None
        data = function_data(resolved.function if resolved is not None else None)
        return data.sampler if data is not None else None


def returns_of(ctx: FileContext, facts_of: FactsOf) -> Returns:
    """The (cached) returned-value analysis of one module."""
    return ctx.shared("data.returns", lambda c: Returns(c, facts_of))
