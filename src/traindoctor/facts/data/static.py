"""Which DataLoaders a file trains with, where they are iterated, and whether more than once.

Five rules (TD101, TD102, TD103, TD201, TD601) ask the same questions about a file's
``DataLoader(...)`` calls: is this a *training* loader (the catalog skips evaluation loaders), which
loops consume it, and is it iterated again and again (an epoch loop) or only once? Answering them
means following the loader's value from its construction through names (``train_loader = ...``),
attributes (``self.train_loader``), functions that return it (``def build_loader(): return
DataLoader(...)``) and functions it is passed to (``train_one_epoch(model, train_loader)``). That
value-flow tracing lives here, computed once per file (:func:`loader_index`), so the rules share one
answer instead of five slightly different ones.

Everything is an approximation made in the direction of silence: a value we cannot follow "escapes"
(its iterations are unknown), and a loop only counts as repeating an iteration when the loader was
created outside it (a loader rebuilt every epoch gains nothing from ``persistent_workers``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, cast

from traindoctor.facts.data.datasets import (
    binding_chain,
    element_kind,
    is_in_memory,
    is_iterable_dataset_call,
    mapped_elements,
    moves_to_device,
    says_evaluation,
)
from traindoctor.facts.data.datasets import indexes_own_data as indexes_own_data
from traindoctor.facts.data.loaders import Loader as Loader
from traindoctor.facts.data.loaders import Site as Site
from traindoctor.facts.data.loaders import Use as Use
from traindoctor.facts.data.memory import DatasetMemory
from traindoctor.facts.data.names import is_evaluation_name as is_evaluation_name
from traindoctor.facts.data.names import is_test_file as is_test_file
from traindoctor.facts.data.names import is_test_module as is_test_module
from traindoctor.facts.data.names import name_tokens as name_tokens
from traindoctor.facts.data.passes import (
    batches_unused,
    forwards_without_grad,
    index_of,
    is_iter_call,
)
from traindoctor.facts.data.passes import inert_read as inert_read
from traindoctor.facts.data.project import function_data, switched_returns
from traindoctor.facts.data.training import (
    callee_name,
    decorator_name,
    is_lightning_train_hook,
)
from traindoctor.facts.data.training import drives_training as drives_training
from traindoctor.facts.data.training import exclusive_branches as exclusive_branches
from traindoctor.facts.data.training import file_trains as file_trains
from traindoctor.facts.data.training import known as known
from traindoctor.facts.data.training import literal_false as literal_false
from traindoctor.facts.data.training import under_no_grad as under_no_grad
from traindoctor.static.args import UNKNOWN
from traindoctor.static.names import dotted, receiver

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import FuncDef, FunctionFacts, Resolved

DATALOADER = "torch.utils.data.DataLoader"
DISTRIBUTED_SAMPLER = "torch.utils.data.DistributedSampler"

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_MAX_DEPTH = 8

# ---------------------------------------------------------------------------------------- index


class LoaderIndex:
    """Value-flow answers about one file, built lazily once per :class:`FileContext`."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self._stores: dict[tuple[int, str], list[ast.AST]] = {}
        self._loads: dict[str, list[ast.Name]] = {}
        self._attr_loads: dict[str, list[ast.Attribute]] = {}
        self._defs: dict[str, list[FuncDef]] = {}
        self._name_calls: dict[str, list[ast.Call]] = {}
        self.memory = DatasetMemory(self)
        self._build()
        self.loaders: list[Loader] = [self._loader(c) for c in ctx.calls_to(DATALOADER)]
        self.loaders += self._factory_loaders()
        self._by_call = {id(l.call): l for l in self.loaders}

    # ------------------------------------------------------------------ public queries
    def loader_of(self, call: ast.Call) -> Loader | None:
        return self._by_call.get(id(call))

    def training_loaders(self) -> list[Loader]:
        """Loaders not known to be evaluation-only, in source order."""
        return [l for l in self.loaders if not (l.evaluation_only or l.peek_only)]

    def trace(self, expr: ast.expr) -> list[Use]:
        """Every path the value of ``expr`` (a construction call) takes through the file."""
        return self._trace_value(expr, (), (), expr, 0, set())

    def reaching_values(self, ref: ast.Name) -> list[ast.expr] | None:
        """The values of the bindings of ``ref`` that may reach it (the nearest one before it,
        with its if/else twins); None when one of them is not a plain ``name = value``."""
        scope = self.resolve_scope(ref)
        if scope is None:
            return None
        out: list[ast.expr] = []
        for store in self.live_stores(ref, scope):
            stmt = self.ctx.statement_of(store)
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and stmt.targets[0] is store):
                return None
            out.append(stmt.value)
        return out

    @property
    def trains(self) -> bool:
        """Whether the file trains (see :func:`file_trains`)."""
        return file_trains(self.ctx)

    # ------------------------------------------------------------------ indexes
    def _build(self) -> None:
        """The file-wide tables; a name's bindings and loads are gathered when first asked about
        (:meth:`_index_name`): finding each binding's scope is the costly part, and most names of a
        large module are never asked about."""
        ctx = self.ctx
        names = ctx.names_by_id
        params: dict[str, list[tuple[ast.AST, ast.arg]]] = {}
        for kind in (*_FUNCS, ast.Lambda):
            for fn in ctx.of(kind):
                a = fn.args
                for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
                    if arg is not None:
                        params.setdefault(arg.arg, []).append((fn, arg))
                if not isinstance(fn, ast.Lambda):
                    self._defs.setdefault(fn.name, []).append(fn)
        self._names, self._params = names, params
        self._indexed: set[str] = set()
        for node in ctx.of(ast.Attribute):
            if isinstance(node.ctx, ast.Load):
                self._attr_loads.setdefault(node.attr, []).append(node)
        for call in ctx.of(ast.Call):
            if isinstance(call.func, ast.Name):
                self._name_calls.setdefault(call.func.id, []).append(call)

    def _index_name(self, name: str) -> None:
        """Record where ``name`` is bound (per scope, in the order the bindings take effect) and
        read, once: the part of the index about one name."""
        if name in self._indexed:
            return
        self._indexed.add(name)
        ctx = self.ctx
        keys: set[tuple[int, str]] = set()
        loads: list[ast.Name] = []
        for node in self._names.get(name, ()):
            if isinstance(node.ctx, ast.Load):
                loads.append(node)
            else:
                scope = ctx.scope_of(node)
                self._add_store(scope, name, node)
                keys.add((id(scope), name))
        for fn, arg in self._params.get(name, ()):
            self._add_store(fn, name, arg)
            keys.add((id(fn), name))
        if loads:
            self._loads[name] = loads
        for key in keys:
            self._stores[key].sort(key=self._store_pos)

    def _stores_of(self, scope: ast.AST, name: str) -> list[ast.AST]:
        """The bindings of ``name`` in ``scope``, in the order they take effect."""
        self._index_name(name)
        return self._stores.get((id(scope), name), [])

    def _add_store(self, scope: ast.AST, name: str, node: ast.AST) -> None:
        self._stores.setdefault((id(scope), name), []).append(node)

    @staticmethod
    def _pos(node: ast.AST) -> tuple[int, int]:
        return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))

    def _store_pos(self, node: ast.AST) -> tuple[int, int]:
        """Where a binding takes effect: after its whole statement for assignments."""
        if isinstance(node, ast.arg):
            return self._pos(node)
        stmt = self.ctx.statement_of(node)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            return (stmt.end_lineno or 0, stmt.end_col_offset or 0)
        return self._pos(node)

    def resolve_scope(self, ref: ast.Name) -> ast.AST | None:
        """The scope whose binding of ``ref.id`` this load reads (None: builtin or import)."""
        ctx = self.ctx
        own = ctx.scope_of(ref)
        scope: ast.AST = own
        while True:
            if not isinstance(scope, ast.ClassDef) or scope is own:
                if self._stores_of(scope, ref.id):
                    return scope
            if scope is ctx.tree:
                return None
            scope = ctx.scope_of(scope)

    # ------------------------------------------------------------------ which stores a load sees
    def exclusive(self, a: ast.AST, b: ast.AST) -> bool:
        return exclusive_branches(self.ctx, a, b)

    def live_stores(self, ref: ast.Name, scope: ast.AST, depth: int = 0) -> list[ast.AST]:
        """The bindings of ``ref`` that may reach it (nearest preceding one, plus if/else twins)."""
        stores = self._stores_of(scope, ref.id)
        if len(stores) <= 1 or depth > 4:
            return list(stores)
        if self.ctx.scope_of(ref) is not scope:
            return list(stores)  # a closure reads whatever was bound last: keep all
        pos = self._pos(ref)
        before = [s for s in stores if self._store_pos(s) <= pos]
        if not before:
            return list(stores)
        live = [before[-1]]
        for store in reversed(before[:-1]):
            if all(self.exclusive(store, other) for other in live):
                live.append(store)  # an if/else twin
            elif self._may_skip(live, ref):
                live.append(store)  # the later bindings may not run (``if changed: loader = ...``)
            else:
                break
        # ``loader = accelerator.prepare(loader)`` continues the loader it wraps; ``it = iter(it)``
        # does not: it is one pass over the loader, however many loops then draw from it.
        for store in list(live):
            stmt = self.ctx.statement_of(store)
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and not is_iter_call(stmt.value):
                for inner in self.ctx.walk(stmt.value):
                    if isinstance(inner, ast.Name) and inner.id == ref.id and isinstance(inner.ctx, ast.Load):
                        live.extend(s for s in self.live_stores(inner, scope, depth + 1) if s not in live)
        return live

    def _may_skip(self, live: list[ast.AST], ref: ast.AST) -> bool:
        """Whether every binding in ``live`` may not run before ``ref`` (each conditional, and no
        two of them the branches of one if/else)."""
        if not all(self._conditional(s, ref) for s in live):
            return False
        return not any(self.exclusive(a, b) for i, a in enumerate(live) for b in live[i + 1 :])

    def _conditional(self, store: ast.AST, ref: ast.AST) -> bool:
        """Whether ``store`` sits in an ``if``/loop/``try`` that does not also hold ``ref``: it may
        not run before ``ref`` is read."""
        for anc in self.ctx.ancestors(store):
            if isinstance(anc, (*_FUNCS, ast.Lambda, ast.ClassDef, ast.Module)):
                return False
            if isinstance(anc, (ast.If, *_LOOPS, ast.Try)) and not self.ctx.within(ref, anc):
                return True
        return False

    def _refs_of_store(self, store: ast.AST, name: str) -> list[ast.Name]:
        scope = self.ctx.scope_of(store)
        out = []
        self._index_name(name)
        for ref in self._loads.get(name, ()):
            if self.resolve_scope(ref) is scope and any(s is store for s in self.live_stores(ref, scope)):
                out.append(ref)
        return out

    # ------------------------------------------------------------------ functions
    def defs_called_by(self, call: ast.Call) -> tuple[list[FuncDef], bool]:
        """Functions of this file that ``call`` may invoke, and whether it is a method call."""
        func = call.func
        if isinstance(func, ast.Name):
            if func.id in self.ctx.imports.names:
                return [], False
            return [d for d in self._defs.get(func.id, ()) if not isinstance(self.ctx.parent(d), ast.ClassDef)], False
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            cls = self.ctx.enclosing(call, ast.ClassDef)
            if cls is None:
                return [], True
            return [d for d in self._defs.get(func.attr, ()) if self.ctx.parent(d) is cls], True
        return [], False

    def call_sites(self, fn: FuncDef) -> list[ast.Call]:
        """Calls of ``fn`` in this file (``f(...)``, or ``self.f(...)`` for a method)."""
        parent = self.ctx.parent(fn)
        if isinstance(parent, ast.ClassDef):
            return [
                c
                for c in self.ctx.method_calls(fn.name)
                if isinstance(r := receiver(c), ast.Name)
                and r.id in ("self", "cls")
                and self.ctx.enclosing(c, ast.ClassDef) is parent
            ]
        if fn.name in self.ctx.imports.names:
            return []
        return list(self._name_calls.get(fn.name, ()))

    @staticmethod
    def param_for(fn: FuncDef, call: ast.Call, arg: ast.AST, method: bool) -> ast.arg | None:
        a = fn.args
        positional = [*a.posonlyargs, *a.args]
        if method and positional:
            positional = positional[1:]
        for i, value in enumerate(call.args):
            if isinstance(value, ast.Starred):
                return None
            if value is arg:
                return positional[i] if i < len(positional) else None
        for kw in call.keywords:
            if kw.value is arg and kw.arg is not None:
                for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
                    if p.arg == kw.arg:
                        return p
        return None

    # ------------------------------------------------------------------ tracing
    def _trace_value(
        self,
        expr: ast.expr,
        names: tuple[str, ...],
        via: tuple[ast.Call, ...],
        origin: ast.AST,
        depth: int,
        seen: set[int],
    ) -> list[Use]:
        """Follow an expression that evaluates to the value to where that value goes."""
        ctx = self.ctx
        if depth > _MAX_DEPTH:
            return [Use(names, refs=[expr], escapes=True)]
        node: ast.expr = expr
        refs = [expr]
        # Climb through ``x if c else y`` and iteration wrappers (enumerate, tqdm, zip, islice).
        while True:
            parent = ctx.parent(node)
            if isinstance(parent, ast.IfExp) and node is not parent.test:
                node = parent
                refs.append(node)
                continue
            call, _ = self._call_of_arg(node)
            if call is not None and callee_name(call) in _WRAPPERS:
                node = call
                continue
            break
        parent = ctx.parent(node)
        site = self._site_of(node, via, origin)
        if site is not None:
            return [Use(names, [site], refs)]
        if inert_read(ctx, node):
            return [Use(names, refs=refs, inert=True)]
        if isinstance(parent, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) and parent.value is node:
            targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
            uses: list[Use] = []
            for target in targets:
                uses += self._trace_target(target, names, via, origin, depth, seen, refs)
            return uses
        if isinstance(parent, ast.Return) and parent.value is node:
            return self._trace_function(parent, names, via, depth, seen, refs, None)
        if isinstance(parent, ast.Tuple):
            index = next(i for i, e in enumerate(parent.elts) if e is node)
            holder = ctx.parent(parent)
            if isinstance(holder, ast.Return):
                return self._trace_function(holder, names, via, depth, seen, refs, index)
            if isinstance(holder, ast.Assign) and holder.value is parent:
                uses = []
                for target in holder.targets:
                    if isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == len(parent.elts):
                        uses += self._trace_target(target.elts[index], names, via, origin, depth, seen, refs)
                    else:
                        uses.append(Use(names, refs=refs, escapes=True))
                return uses
        if isinstance(parent, ast.Dict):
            key = next((k for k, v in zip(parent.keys, parent.values) if v is node), None)
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                names = (*names, key.value)
                holder = ctx.parent(parent)
                if isinstance(holder, ast.Return) and holder.value is parent:
                    return self._trace_function(holder, names, via, depth, seen, refs, key.value)
                if isinstance(holder, ast.Assign) and holder.value is parent and len(holder.targets) == 1:
                    target = holder.targets[0]
                    found = self._name_element_uses(target, key.value, names, origin, depth, seen)
                    if found is not None:
                        if found:
                            found[0].refs[:0] = refs
                        return found or [Use(names, refs=refs)]
            return [Use(names, refs=refs, escapes=True)]
        call, arg_node = self._call_of_arg(node)
        if call is not None:
            fns, method = self.defs_called_by(call)
            if not fns:
                site = self._project_site(call, arg_node, via, origin)
                if site is not None:
                    return [Use(names, [site], refs)]
                if self._project_reads_only(call, arg_node):
                    return [Use(names, refs=refs, inert=True)]
            uses = []
            for fn in fns:
                param = self.param_for(fn, call, arg_node, method)
                if param is None:
                    continue
                param_id = id(param)
                if param_id in seen:
                    continue
                refs_in = self._refs_of_store(param, param.arg)
                sub_seen = seen | {param_id}
                inner: list[Use] = []
                for ref in refs_in:
                    inner += self._trace_value(ref, (*names, param.arg), (*via, call), origin, depth + 1, sub_seen)
                if not inner:
                    inner = [Use((*names, param.arg), refs=list(refs), escapes=True)]
                else:
                    inner[0].refs[:0] = refs
                uses += inner
            if uses:
                return uses
        stmt = ctx.statement_of(node)
        if isinstance(stmt, ast.Assign):
            names = (
                *names,
                *(
                    t.id if isinstance(t, ast.Name) else t.attr
                    for t in stmt.targets
                    if isinstance(t, (ast.Name, ast.Attribute))
                ),
            )
        return [Use(names, refs=refs, escapes=True)]

    def _call_of_arg(self, node: ast.AST) -> tuple[ast.Call | None, ast.AST]:
        """The call that receives ``node`` as an argument (positional or keyword), if any."""
        parent = self.ctx.parent(node)
        if isinstance(parent, ast.keyword):
            call = self.ctx.parent(parent)
            return (call, node) if isinstance(call, ast.Call) else (None, node)
        if isinstance(parent, ast.Call) and node is not parent.func and node in parent.args:
            return parent, node
        return None, node

    def _trace_target(
        self,
        target: ast.AST,
        names: tuple[str, ...],
        via: tuple[ast.Call, ...],
        origin: ast.AST,
        depth: int,
        seen: set[int],
        refs: list[ast.expr],
    ) -> list[Use]:
        if isinstance(target, ast.Name):
            if id(target) in seen:
                return []
            seen = seen | {id(target)}
            uses: list[Use] = []
            for ref in self._refs_of_store(target, target.id):
                uses += self._trace_value(ref, (*names, target.id), via, origin, depth + 1, seen)
            if not uses:
                return [Use((*names, target.id), refs=list(refs))]
            uses[0].refs[:0] = refs
            return uses
        if isinstance(target, ast.Attribute):
            text = dotted(target)
            if text is None or id(target) in seen:
                return [Use((*names, target.attr), refs=list(refs), escapes=True)]
            seen = seen | {id(target)}
            owner = self.ctx.enclosing(target, ast.ClassDef) if text.startswith(("self.", "cls.")) else None
            uses = []
            for load in self._attr_loads.get(target.attr, ()):
                if dotted(load) != text:
                    continue
                if owner is not None and self.ctx.enclosing(load, ast.ClassDef) is not owner:
                    continue
                uses += self._trace_value(load, (*names, target.attr), (), origin, depth + 1, seen)
            if not uses:
                return [Use((*names, target.attr), refs=list(refs))]
            uses[0].refs[:0] = refs
            return uses
        if isinstance(target, ast.Subscript):
            key = target.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                names = (*names, key.value)
        return [Use(names, refs=list(refs), escapes=True)]

    def _trace_function(
        self,
        ret: ast.Return,
        names: tuple[str, ...],
        via: tuple[ast.Call, ...],
        depth: int,
        seen: set[int],
        refs: list[ast.expr],
        index: int | str | None,
    ) -> list[Use]:
        """The value is returned by a function (element ``index`` of a returned tuple, list or
        dict, or the value itself): follow the function's callers."""
        ctx = self.ctx
        fn = ctx.enclosing(ret, (*_FUNCS, ast.Lambda))
        if not isinstance(fn, _FUNCS) or id(fn) in seen:
            return [Use(names, refs=refs, escapes=True)]
        seen = seen | {id(fn)}
        names = (*names, fn.name)
        if index is None and is_lightning_train_hook(ctx, fn):
            return [Use(names, [Site(fn, "hook", via, repeated_by=fn)], refs)]
        uses: list[Use] = []
        if index is None and any(decorator_name(d) in ("property", "cached_property") for d in fn.decorator_list):
            cls = ctx.parent(fn)
            for ref in self._attr_loads.get(fn.name, ()):
                if (
                    isinstance(ref.value, ast.Name)
                    and ref.value.id == "self"
                    and ctx.enclosing(ref, ast.ClassDef) is cls
                ):
                    uses += self._trace_value(ref, names, (), ref, depth + 1, seen)
        else:
            for call in self.call_sites(fn):
                if index is None:
                    uses += self._trace_value(call, names, (), call, depth + 1, seen)
                    continue
                uses += self._element_uses(call, index, names, depth, seen) or []
        if not uses:
            return [Use(names, refs=refs, escapes=True)]
        uses[0].refs[:0] = refs
        return uses

    # ------------------------------------------------------------------ iteration sites
    def _site_of(self, node: ast.expr, via: tuple[ast.Call, ...], origin: ast.AST) -> Site | None:
        ctx = self.ctx
        parent = ctx.parent(node)
        site: Site | None = None
        if isinstance(parent, (ast.For, ast.AsyncFor)) and parent.iter is node:
            site = Site(parent, "for", via)
        elif isinstance(parent, ast.comprehension) and parent.iter is node:
            comp = ctx.parent(parent)
            site = Site(comp if comp is not None else parent, "for", via)
        elif isinstance(parent, ast.YieldFrom) and parent.value is node:
            site = Site(parent, "for", via)  # ``while True: yield from loader``: a generator's pass
        else:
            call, _ = self._call_of_arg(node)
            if (
                call is not None
                and callee_name(call) in ("iter", "cycle", "aiter")
                and call.args
                and call.args[0] is node
                and not self.defs_called_by(call)[0]  # a local ``def cycle(dl)`` is followed instead
            ):
                site = Site(call, "iter", via)
        if site is None:
            return None
        if isinstance(site.node, (ast.For, ast.AsyncFor)):
            site.unused = batches_unused(ctx, site.node)
        site.repeated_by = self._repeating_loop(site.node, via, origin, 0, frozenset())
        site.evaluation = self._evaluation_site(site)
        if site.kind == "iter" and site.repeated_by is None:
            outer, _ = self._call_of_arg(site.node)
            site.peek = outer is not None and callee_name(outer) == "next" and not outer.keywords
        return site

    def _project_site(self, call: ast.Call, arg: ast.AST, via: tuple[ast.Call, ...], origin: ast.AST) -> Site | None:
        """``train_one_epoch(model, loader, ...)`` where the project function iterates that
        parameter: the call is a pass over the loader, repeated by the loops around the call."""
        found = self._project_function(call)
        if found is None:
            return None
        resolved, fn = found
        param = fn.param_for(call, arg)
        if param is None or param not in fn.iterates:
            return None
        site = Site(call, "for", via)
        site.repeated_by = self._repeating_loop(call, via, origin, 0, frozenset())
        data = function_data(fn)
        site.evaluation = (data is not None and data.evaluation) or self._evaluation_site(site)
        site.related = self.ctx.project.related(
            fn.iterates[param],
            f"`{resolved.name}` iterates its `{param}` argument here",
        )
        return site

    def _project_reads_only(self, call: ast.Call, arg: ast.AST) -> bool:
        """``shuffle_dataset(loader, epoch)`` where the project function only reads attributes of
        that parameter (``loader.sampler``): the call neither iterates the loader nor hands it on."""
        found = self._project_function(call)
        if found is None:
            return False
        fn = found[1]
        param = fn.param_for(call, arg)
        data = function_data(fn)
        return param is not None and data is not None and param in data.reads_only

    def _loop_counts(self, loop: ast.AST) -> bool:
        """Whether a loop may run its body more than once (``range(1)`` and ``while False`` do not)."""
        if isinstance(loop, ast.While):
            v = self.ctx.value(loop.test)
            return v is UNKNOWN or bool(v)
        it = cast("ast.For | ast.AsyncFor", loop).iter  # enclosing_loops: a for, unless a while
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and len(it.args) == 1:
            n = self.ctx.value(it.args[0])
            if isinstance(n, int) and not isinstance(n, bool) and n <= 1:
                return False
        if isinstance(it, (ast.List, ast.Tuple)) and len(it.elts) <= 1:
            return False
        return True

    def _repeating_loop(
        self, node: ast.AST, via: tuple[ast.Call, ...], origin: ast.AST, depth: int, seen: frozenset[int]
    ) -> ast.AST | None:
        """A loop, created outside ``origin``'s reach, that runs ``node`` again and again."""
        ctx = self.ctx
        for loop in ctx.enclosing_loops(node):
            if self._loop_counts(loop) and not ctx.within(origin, loop):
                return loop
        fn = ctx.function_of(node)
        if not isinstance(fn, _FUNCS) or depth > 4:
            return None
        if via:
            call = via[-1]
            if fn in self.defs_called_by(call)[0]:
                return self._repeating_loop(call, via[:-1], origin, depth + 1, seen)
        if id(fn) in seen or ctx.within(origin, fn):
            return None  # a loader built inside the function is rebuilt by every call
        for call in self.call_sites(fn):
            found = self._repeating_loop(call, (), origin, depth + 1, seen | {id(fn)})
            if found is not None:
                return found
        return None

    def _evaluation_site(self, site: Site) -> bool:
        ctx = self.ctx
        scope = site.node if isinstance(site.node, (ast.For, ast.AsyncFor)) else ctx.function_of(site.node) or ctx.tree
        has_backward = any(ctx.within(c, scope) for c in ctx.method_calls("backward"))
        if has_backward:
            return False
        if any(under_no_grad(ctx, n) for n in (site.node, *site.via)):
            return True
        fn = ctx.function_of(site.node)
        if isinstance(fn, _FUNCS) and is_evaluation_name(fn.name):
            return not any(ctx.within(c, fn) for c in ctx.method_calls("backward"))
        return isinstance(site.node, (ast.For, ast.AsyncFor)) and forwards_without_grad(ctx, site.node)

    # ------------------------------------------------------------------ loaders
    def _project_function(self, call: ast.Call) -> tuple[Resolved, FunctionFacts] | None:
        """The project function (in another module) that ``call`` invokes, and its facts, if any."""
        view = self.ctx.project
        if view is None or not view.imports_project or not drives_training(self.ctx):
            return None
        resolved = view.resolve(call.func)
        if resolved is None or resolved.function is None:
            return None
        return resolved, resolved.function

    def _factory_loaders(self) -> list[Loader]:
        """Calls of project functions in other modules that build and return a DataLoader: the
        return value itself (one loader per construction it may be, built in different branches)
        or an element of a returned tuple that the call unpacks (``train_dl, val_dl = build(cfg)``)."""
        view = self.ctx.project
        if view is None or not view.imports_project or not drives_training(self.ctx):
            return []
        out = []
        for call, resolved in view.calls():
            data = function_data(resolved.function)
            if data is None:
                continue
            returns = data.returns or (((None, data.loader),) if data.loader is not None else ())
            if not returns and resolved.function is not None:
                from traindoctor.facts.data.factories import facts_signature, passed_value

                sig = facts_signature(resolved.function)
                returns = switched_returns(data, partial(passed_value, self.ctx, call, sig))
            if not returns:
                continue
            seen: list[tuple[int | str | None, object]] = []
            for index, facts in returns:
                if facts is None:
                    continue
                key = (index, sorted(facts.keywords.items()))
                if key in seen:
                    continue  # the same keywords in two branches: one loader to judge
                seen.append(key)
                uses = self._factory_uses(call, index)
                if uses is None:
                    continue
                loader = Loader(
                    call,
                    uses,
                    evaluation_dataset=facts.evaluation,
                    in_memory=facts.in_memory,
                    iterable=facts.iterable,
                    on_device=facts.on_device,
                    factory=resolved,
                    facts=facts if facts is not data.loader else None,
                )
                loader.related = view.related(facts.place, f"the DataLoader is built here, in `{resolved.name}`")
                out.append(loader)
        return out

    def _factory_uses(self, call: ast.Call, index: int | str | None) -> list[Use] | None:
        """Where the loader a factory call returns goes: the call's value, or element ``index``
        of the tuple, list or dict it returns (None: not followed)."""
        if index is None:
            return self.trace(call)
        return self._element_uses(call, index, (), 0, set())

    def _element_uses(
        self, call: ast.Call, index: int | str, names: tuple[str, ...], depth: int, seen: set[int]
    ) -> list[Use] | None:
        """Where element ``index`` of the tuple, list or dict ``call`` returns goes: unpacked into
        as many names (``train_dl, val_dl = build(cfg)``), or read with a constant index or key,
        directly or through a name bound once to the call (``loaders = build(cfg)`` ...
        ``loaders[0]``, ``loaders["train"]``)."""
        ctx = self.ctx
        parent = ctx.parent(call)
        if isinstance(parent, ast.Subscript) and parent.value is call:
            key = index_of(parent)
            if key is None:
                return None
            return self._trace_value(parent, names, (), call, depth + 1, seen) if key == index else []
        if not (isinstance(parent, ast.Assign) and parent.value is call and len(parent.targets) == 1):
            return None
        target = parent.targets[0]
        if isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(index, int) or index >= len(target.elts):
                return None
            if any(isinstance(e, ast.Starred) for e in target.elts):
                return None
            return self._trace_target(target.elts[index], names, (), call, depth + 1, seen, [call])
        uses = self._name_element_uses(target, index, names, call, depth, seen)
        if uses:
            uses[0].refs[:0] = [call]
        return uses

    def _name_element_uses(
        self, target: ast.expr, index: int | str, names: tuple[str, ...], origin: ast.AST, depth: int, seen: set[int]
    ) -> list[Use] | None:
        """Element ``index`` of a container bound once to the name ``target``, read as
        ``target[index]``; None when the container itself goes somewhere else (or is changed)."""
        ctx = self.ctx
        if not isinstance(target, ast.Name) or target.id in ctx.mutated_names:
            return None
        if len(self._stores_of(ctx.scope_of(target), target.id)) != 1:
            return None
        uses: list[Use] = []
        for ref in self._refs_of_store(target, target.id):
            holder = ctx.parent(ref)
            if isinstance(holder, ast.Subscript) and holder.value is ref and isinstance(holder.ctx, ast.Load):
                key = index_of(holder)
                if key is None:
                    return None  # ``loaders[phase]``: any element may be read there
                if key == index:
                    uses += self._trace_value(holder, (*names, target.id), (), origin, depth + 1, seen)
                continue
            if inert_read(ctx, ref):
                continue
            return None  # the container goes somewhere else: its elements cannot be followed
        return uses

    def _loader(self, call: ast.Call) -> Loader:
        ctx = self.ctx
        loader = Loader(call, self.trace(call))
        fn = ctx.function_of(call)
        while isinstance(fn, ast.Lambda):
            fn = ctx.function_of(fn)
        loader.built_for_evaluation = isinstance(fn, _FUNCS) and is_evaluation_name(fn.name)
        dataset = ctx.arg(call, "dataset")
        if isinstance(dataset, ast.AST):
            chain = list(binding_chain(ctx, dataset))
            loader.evaluation_dataset = any(says_evaluation(ctx, e) for e in chain)
            loader.in_memory = (
                any(is_in_memory(ctx, e) for e in chain)
                or self.memory.passed(chain[-1])
                or self.memory.rebound(chain[-1])
                or self.memory.returned(chain[-1])
            )
            loader.iterable = any(is_iterable_dataset_call(ctx, e) for e in chain)
            mapped = mapped_elements(ctx, chain[-1])
            if mapped and not (loader.in_memory or loader.iterable):
                kinds = [element_kind(ctx, e) for e in mapped]
                loader.in_memory = all(k == "memory" for k in kinds)
                loader.iterable = all(k == "iterable" for k in kinds)
                if not (loader.in_memory or loader.iterable) and all(kinds):
                    # every dataset the factory is mapped over is in memory or iterable
                    loader.in_memory = True
            loader.on_device = any(moves_to_device(ctx, e) for e in chain)
        return loader


# ---------------------------------------------------------------------------------------- helpers

#: Calls that pass iteration through to their argument (``for i, b in enumerate(loader)``).
_WRAPPERS = frozenset({"enumerate", "zip", "tqdm", "islice", "track", "trange", "chain", "log_every"})


def loader_index(ctx: FileContext) -> LoaderIndex:
    """The (cached) loader analysis of one file."""
    return ctx.shared("loaders", LoaderIndex)


def may_build_loaders(ctx: FileContext) -> bool:
    """Whether the file constructs a DataLoader, or drives training and imports project modules
    that may build one."""
    if ctx.calls_to(DATALOADER):
        return True
    view = ctx.project
    return view is not None and view.imports_project and drives_training(ctx)


def iter_training_loaders(ctx: FileContext) -> Iterable[Loader]:
    """Training loaders of a file that drives training (see :func:`drives_training`), in source
    order; in any other file, only the loaders a Lightning ``train_dataloader`` hook returns.

    Test files (:func:`is_test_file`) have none: performance advice on test loaders is noise.
    """
    if is_test_file(ctx.filename) or not may_build_loaders(ctx):
        return []
    if not drives_training(ctx):
        if not ctx.calls_to(DATALOADER):
            return []
        # A Lightning ``train_dataloader`` is the training input wherever it is defined.
        return [l for l in loader_index(ctx).training_loaders() if any(s.kind == "hook" for s in l.sites)]
    return loader_index(ctx).training_loaders()
