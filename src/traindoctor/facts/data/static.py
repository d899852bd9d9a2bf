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
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from traindoctor.facts.data.project import function_data, holds_its_data, loader_keyword
from traindoctor.static.args import MISSING, UNKNOWN, ArgResult
from traindoctor.static.names import OPTIMIZERS, dotted, receiver

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.finding import Related
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import FuncDef, FunctionFacts, Resolved

DATALOADER = "torch.utils.data.DataLoader"
DISTRIBUTED_SAMPLER = "torch.utils.data.DistributedSampler"
_TENSOR_DATASETS = frozenset(
    {
        "torch.utils.data.TensorDataset",
        "torch.utils.data.dataset.TensorDataset",
        # Lightning's demo datasets (used by its examples and docs): the corpus or random tensors are
        # built once in ``__init__`` and ``__getitem__`` slices them.
        *(
            f"{package}.{name}"
            for package in ("lightning.pytorch", "pytorch_lightning")
            for name in (
                "demos.WikiText2",
                "demos.RandomDataset",
                "demos.RandomDictDataset",
                "demos.transformer.WikiText2",
                "demos.boring_classes.RandomDataset",
                "demos.boring_classes.RandomDictDataset",
            )
        ),
    }
)

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_MAX_DEPTH = 8

# ---------------------------------------------------------------------------------------- names

#: Words that mark a loader, dataset or function as evaluation-only.
_EVAL_WORDS = frozenset(
    {
        "val",
        "valid",
        "validation",
        "validate",
        "validating",
        "test",
        "tests",
        "testing",
        "tst",
        "eval",
        "evaluate",
        "evaluation",
        "evaluating",
        "dev",
        "holdout",
        "inference",
        "predict",
        "prediction",
        "predictions",
    }
)
#: ``valloader``, ``testset``: an evaluation word glued to one of these.
_EVAL_PREFIXES = ("validation", "valid", "val", "testing", "test", "eval", "dev")
_GLUED = frozenset(
    {
        "loader",
        "loaders",
        "dl",
        "dataloader",
        "dataloaders",
        "data",
        "set",
        "sets",
        "ds",
        "dataset",
        "datasets",
        "iter",
        "batches",
        "sampler",
        "split",
    }
)
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def name_tokens(name: str) -> list[str]:
    """``valLoader2`` -> ``["val", "loader"]``: lower-case words of an identifier."""
    return [t for t in re.split(r"[^a-z]+", _CAMEL.sub("_", name).lower()) if t]


def is_evaluation_name(name: str) -> bool:
    """Whether an identifier says evaluation (``val_loader``, ``testloader``, ``evaluate``).

    Whole words only, so ``interval_loader`` and ``latest_loader`` are not evaluation names.
    """
    for token in name_tokens(name):
        if token in _EVAL_WORDS:
            return True
        for prefix in _EVAL_PREFIXES:
            if token.startswith(prefix) and token[len(prefix) :] in _GLUED:
                return True
    return False


# ---------------------------------------------------------------------------------------- results


@dataclass
class Site:
    """One place that starts a pass over the loader: a ``for`` loop, a comprehension, ``iter()``."""

    node: ast.AST
    #: "for" (loop or comprehension), "iter" (``iter()``/``cycle()``), "hook" (a framework hook
    #: such as Lightning's ``train_dataloader``, iterated by the trainer every epoch).
    kind: str
    #: Calls through which the loader was passed (as an argument) to reach this site.
    via: tuple[ast.Call, ...] = ()
    #: The loop (or hook function) that makes this site run more than once, if any.
    repeated_by: ast.AST | None = None
    #: Under ``no_grad``/``inference_mode`` (or in an evaluation function) with no backward.
    evaluation: bool = False
    #: Where in another project module the pass happens (``engine.train_one_epoch``'s loop).
    related: tuple[Related, ...] = ()
    #: ``next(iter(loader))`` run once (no loop repeats it): one batch taken to look at (plot a
    #: sample, size a layer), not a pass that trains.
    peek: bool = False


@dataclass
class Use:
    """One path the loader's value takes: the names it travels under and where it ends up."""

    names: tuple[str, ...]
    sites: list[Site] = field(default_factory=list)
    #: Expressions that evaluate to the loader along this path (its construction included).
    refs: list[ast.expr] = field(default_factory=list)
    #: The value went somewhere we cannot follow (an unknown function, a container).
    escapes: bool = False

    @property
    def evaluation(self) -> bool:
        if any(is_evaluation_name(n) for n in self.names):
            return True
        return bool(self.sites) and all(s.evaluation for s in self.sites)


@dataclass
class Loader:
    """One ``DataLoader(...)`` construction and everything known about how it is used."""

    call: ast.Call
    uses: list[Use]
    #: The dataset argument itself says evaluation (``val_ds``, ``MNIST(train=False)``).
    evaluation_dataset: bool = False
    #: Dataset made of in-memory tensors (``TensorDataset``): workers rarely pay off.
    in_memory: bool = False
    #: Dataset is an ``IterableDataset`` defined in this file (workers need sharding).
    iterable: bool = False
    #: Dataset tensors are already on a device (``.cuda()``/``.to(...)``): pinning cannot apply.
    on_device: bool = False
    #: Built inside a function whose name says evaluation (``def val_dataloader(self)``).
    built_for_evaluation: bool = False
    #: Built by a project function in another module (``utils.get_training_dataloader(...)``):
    #: ``call`` is then the factory call in this file and the keywords come from its summary.
    factory: Resolved | None = None
    #: Where the DataLoader is really constructed, when that is another file.
    related: tuple[Related, ...] = ()

    def arg(self, ctx: FileContext, name: str) -> ArgResult:
        """The DataLoader's ``name`` argument: a node (for a factory, a constant node holding the
        value it passes), MISSING when not passed, UNKNOWN when it cannot be told."""
        if self.factory is None:
            return ctx.arg(self.call, name)
        value = loader_keyword(self.factory, self.call, ctx, name)
        if value is MISSING or value is UNKNOWN:
            return value
        node = ast.Constant(value)  # stands at the factory call: that is where the value enters
        node.lineno, node.col_offset = self.call.lineno, self.call.col_offset
        node.end_lineno, node.end_col_offset = self.call.lineno, self.call.col_offset
        return node

    @property
    def evaluation_only(self) -> bool:
        """Evaluation loader by the catalog's definition: skipped by TD101-TD103."""
        if self.evaluation_dataset or self.built_for_evaluation:
            return True
        return bool(self.uses) and all(u.evaluation for u in self.uses)

    @property
    def peek_only(self) -> bool:
        """Only ever used for ``next(iter(loader))`` once: a batch to look at, not a training loader."""
        if not self.uses or any(u.escapes for u in self.uses):
            return False
        sites = self.sites
        return bool(sites) and all(s.peek for s in sites)

    @property
    def sites(self) -> list[Site]:
        return [s for u in self.uses for s in u.sites]

    @property
    def repeated_site(self) -> Site | None:
        """The first site that runs more than once (an epoch loop around it), if any."""
        for site in self.sites:
            if site.repeated_by is not None:
                return site
        return None

    @property
    def refs(self) -> list[ast.expr]:
        return [r for u in self.uses for r in u.refs]

    @property
    def names(self) -> list[str]:
        seen: list[str] = []
        for u in self.uses:
            for n in u.names:
                if n not in seen:
                    seen.append(n)
        return seen


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

    def _resolve_scope(self, ref: ast.Name) -> ast.AST | None:
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
    def _exclusive(self, a: ast.AST, b: ast.AST) -> bool:
        return exclusive_branches(self.ctx, a, b)

    def _live_stores(self, ref: ast.Name, scope: ast.AST, depth: int = 0) -> list[ast.AST]:
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
            if all(self._exclusive(store, other) for other in live):
                live.append(store)
            else:
                break
        # ``loader = accelerator.prepare(loader)`` continues the loader it wraps.
        for store in list(live):
            stmt = self.ctx.statement_of(store)
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
                for inner in self.ctx.walk(stmt.value):
                    if isinstance(inner, ast.Name) and inner.id == ref.id and isinstance(inner.ctx, ast.Load):
                        live.extend(s for s in self._live_stores(inner, scope, depth + 1) if s not in live)
        return live

    def _refs_of_store(self, store: ast.AST, name: str) -> list[ast.Name]:
        scope = self.ctx.scope_of(store)
        out = []
        self._index_name(name)
        for ref in self._loads.get(name, ()):
            if self._resolve_scope(ref) is scope and any(s is store for s in self._live_stores(ref, scope)):
                out.append(ref)
        return out

    # ------------------------------------------------------------------ functions
    def _defs_called_by(self, call: ast.Call) -> tuple[list[FuncDef], bool]:
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

    def _call_sites(self, fn: FuncDef) -> list[ast.Call]:
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

    def _returned_in_memory(self, expr: ast.AST, depth: int = 0) -> bool:
        """A dataset returned by a function of this file whose every ``return`` gives an
        in-memory dataset: ``feats = prepare_features(model, imgs)`` (``return
        TensorDataset(...)``), or ``dataset, model, opt = load_train_objs()`` (``return
        MyTrainDataset(2048), model, optimizer``)."""
        ctx = self.ctx
        if depth > 2:
            return False
        index: int | None = None
        call: ast.AST | None = expr
        if isinstance(expr, ast.Name):
            scope = self._resolve_scope(expr)
            stores = self._live_stores(expr, scope) if scope is not None else []
            if len(stores) != 1:
                return False
            stmt = ctx.statement_of(stores[0])
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
                return False
            target = stmt.targets[0]
            if isinstance(target, (ast.Tuple, ast.List)):
                if any(isinstance(e, ast.Starred) for e in target.elts):
                    return False
                index = next((i for i, e in enumerate(target.elts) if e is stores[0]), None)
                if index is None:
                    return False
            elif target is not stores[0]:
                return False
            call = stmt.value
        if not isinstance(call, ast.Call):
            return False
        if _callee(call) == "random_split" and call.args:  # ``train_ds, val_ds = random_split(ds, ...)``
            chain = list(_binding_chain(ctx, call.args[0]))
            return (
                any(_is_in_memory(ctx, e) for e in chain)
                or self._passed_in_memory(chain[-1], depth + 1)
                or self._returned_in_memory(chain[-1], depth + 1)
            )
        defs, _method = self._defs_called_by(call)
        if len(defs) != 1:
            return False
        returns = [
            r
            for r in ctx.walk(defs[0])
            if isinstance(r, ast.Return) and ctx.enclosing(r, (*_FUNCS, ast.Lambda)) is defs[0]
        ]
        if not returns:
            return False
        for ret in returns:
            value = ret.value
            if index is not None:
                if not (isinstance(value, (ast.Tuple, ast.List)) and index < len(value.elts)):
                    return False
                value = value.elts[index]
            if value is None:
                return False
            chain = list(_binding_chain(ctx, value))
            if not (any(_is_in_memory(ctx, e) for e in chain) or self._returned_in_memory(chain[-1], depth + 1)):
                return False
        return True

    def _rebound_in_memory(self, expr: ast.AST) -> bool:
        """A name bound several times (``ds = load_dataset(...)`` in one branch,
        ``ds = TensorDataset(...)`` in the other) whose bindings that can reach this use are all
        in-memory datasets."""
        ctx = self.ctx
        if not isinstance(expr, ast.Name):
            return False
        scope = self._resolve_scope(expr)
        if scope is None:
            return False
        live = [s for s in self._live_stores(expr, scope) if not self._exclusive(s, expr)]
        if not live:
            return False
        for store in live:
            stmt = ctx.statement_of(store)
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and stmt.targets[0] is store):
                return False
            if not any(_is_in_memory(ctx, e) for e in _binding_chain(ctx, stmt.value)):
                return False
        return True

    def _passed_in_memory(self, expr: ast.AST, depth: int = 0) -> bool:
        """``expr`` is a parameter of a function of this file, and every call of that function
        passes an in-memory dataset for it (``def make_loader(ds): return DataLoader(ds)``
        called as ``make_loader(TensorDataset(x, y))``)."""
        ctx = self.ctx
        if not isinstance(expr, ast.Name) or depth > 2 or ctx.bindings_of(expr) != [None]:
            return False
        fn = ctx.function_of(expr)
        if not isinstance(fn, _FUNCS):
            return False
        a = fn.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
        if not any(p.arg == expr.id for p in params):
            return False
        method = isinstance(ctx.parent(fn), ast.ClassDef)
        passed: list[ast.AST] = []
        for call in self._call_sites(fn):
            candidates = [*call.args, *(kw.value for kw in call.keywords)]
            found = [
                c for c in candidates if (p := self._param_for(fn, call, c, method)) is not None and p.arg == expr.id
            ]
            if len(found) != 1:
                return False  # not passed (default), or passed in a way we cannot tell
            passed.append(found[0])
        if not passed:
            return False
        for value in passed:
            chain = list(_binding_chain(ctx, value))
            if not (
                any(_is_in_memory(ctx, e) for e in chain)
                or self._passed_in_memory(chain[-1], depth + 1)
                or self._returned_in_memory(chain[-1])
            ):
                return False
        return True

    @staticmethod
    def _param_for(fn: FuncDef, call: ast.Call, arg: ast.AST, method: bool) -> ast.arg | None:
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
            if call is not None and _callee(call) in _WRAPPERS:
                node = call
                continue
            break
        parent = ctx.parent(node)
        site = self._site_of(node, via, origin)
        if site is not None:
            return [Use(names, [site], refs)]
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
            return [Use(names, refs=refs, escapes=True)]
        call, arg_node = self._call_of_arg(node)
        if call is not None:
            fns, method = self._defs_called_by(call)
            if not fns:
                site = self._project_site(call, arg_node, via, origin)
                if site is not None:
                    return [Use(names, [site], refs)]
            uses = []
            for fn in fns:
                param = self._param_for(fn, call, arg_node, method)
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
        index: int | None,
    ) -> list[Use]:
        """The value is returned by a function: follow the function's callers."""
        ctx = self.ctx
        fn = ctx.enclosing(ret, (*_FUNCS, ast.Lambda))
        if not isinstance(fn, _FUNCS) or id(fn) in seen:
            return [Use(names, refs=refs, escapes=True)]
        seen = seen | {id(fn)}
        names = (*names, fn.name)
        if index is None and _is_lightning_train_hook(ctx, fn):
            return [Use(names, [Site(fn, "hook", via, repeated_by=fn)], refs)]
        uses: list[Use] = []
        if index is None and any(_decorator_name(d) in ("property", "cached_property") for d in fn.decorator_list):
            cls = ctx.parent(fn)
            for ref in self._attr_loads.get(fn.name, ()):
                if (
                    isinstance(ref.value, ast.Name)
                    and ref.value.id == "self"
                    and ctx.enclosing(ref, ast.ClassDef) is cls
                ):
                    uses += self._trace_value(ref, names, (), ref, depth + 1, seen)
        else:
            for call in self._call_sites(fn):
                if index is None:
                    uses += self._trace_value(call, names, (), call, depth + 1, seen)
                    continue
                parent = ctx.parent(call)
                if isinstance(parent, ast.Assign) and parent.value is call:
                    for target in parent.targets:
                        if (
                            isinstance(target, (ast.Tuple, ast.List))
                            and index < len(target.elts)
                            and not any(isinstance(e, ast.Starred) for e in target.elts)
                        ):
                            uses += self._trace_target(target.elts[index], names, (), call, depth + 1, seen, [])
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
        else:
            call, _ = self._call_of_arg(node)
            if (
                call is not None
                and _callee(call) in ("iter", "cycle", "aiter")
                and call.args
                and call.args[0] is node
                and not self._defs_called_by(call)[0]  # a local ``def cycle(dl)`` is followed instead
            ):
                site = Site(call, "iter", via)
        if site is None:
            return None
        site.repeated_by = self._repeating_loop(site.node, via, origin, 0, frozenset())
        site.evaluation = self._evaluation_site(site)
        if site.kind == "iter" and site.repeated_by is None:
            outer, _ = self._call_of_arg(site.node)
            site.peek = outer is not None and _callee(outer) == "next" and not outer.keywords
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
            if fn in self._defs_called_by(call)[0]:
                return self._repeating_loop(call, via[:-1], origin, depth + 1, seen)
        if id(fn) in seen or ctx.within(origin, fn):
            return None  # a loader built inside the function is rebuilt by every call
        for call in self._call_sites(fn):
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
        return False

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
        """Calls of project functions in other modules that build and return a DataLoader."""
        view = self.ctx.project
        if view is None or not view.imports_project or not drives_training(self.ctx):
            return []
        out = []
        for call, resolved in view.calls():
            data = function_data(resolved.function)
            if data is None or data.loader is None:
                continue
            facts = data.loader
            loader = Loader(
                call,
                self.trace(call),
                evaluation_dataset=facts.evaluation,
                in_memory=facts.in_memory,
                iterable=facts.iterable,
                on_device=facts.on_device,
                factory=resolved,
            )
            loader.related = view.related(facts.place, f"the DataLoader is built here, in `{resolved.name}`")
            out.append(loader)
        return out

    def _loader(self, call: ast.Call) -> Loader:
        ctx = self.ctx
        loader = Loader(call, self.trace(call))
        fn = ctx.function_of(call)
        while isinstance(fn, ast.Lambda):
            fn = ctx.function_of(fn)
        loader.built_for_evaluation = isinstance(fn, _FUNCS) and is_evaluation_name(fn.name)
        dataset = ctx.arg(call, "dataset")
        if isinstance(dataset, ast.AST):
            chain = list(_binding_chain(ctx, dataset))
            loader.evaluation_dataset = any(_says_evaluation(ctx, e) for e in chain)
            loader.in_memory = (
                any(_is_in_memory(ctx, e) for e in chain)
                or self._passed_in_memory(chain[-1])
                or self._rebound_in_memory(chain[-1])
                or self._returned_in_memory(chain[-1])
            )
            loader.iterable = any(_is_iterable_dataset_call(ctx, e) for e in chain)
            mapped = _mapped_elements(ctx, chain[-1])
            if mapped and not (loader.in_memory or loader.iterable):
                kinds = [_element_kind(ctx, e) for e in mapped]
                loader.in_memory = all(k == "memory" for k in kinds)
                loader.iterable = all(k == "iterable" for k in kinds)
                if not (loader.in_memory or loader.iterable) and all(kinds):
                    # every dataset the factory is mapped over is in memory or iterable
                    loader.in_memory = True
            loader.on_device = any(_moves_to_device(ctx, e) for e in chain)
        return loader


# ---------------------------------------------------------------------------------------- helpers

#: Calls that pass iteration through to their argument (``for i, b in enumerate(loader)``).
_WRAPPERS = frozenset({"enumerate", "zip", "tqdm", "islice", "track", "trange", "chain", "log_every"})


def _callee(call: ast.Call) -> str:
    text = dotted(call.func)
    return text.rsplit(".", 1)[-1] if text else ""


def _decorator_name(node: ast.AST) -> str:
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


def _binding_chain(ctx: FileContext, expr: ast.AST) -> Iterator[ast.AST]:
    """``expr`` and the expressions it stands for, a few hops deep: names bound once,
    ``self.x`` assigned once in the class, and the dataset wrapped by ``Subset(ds, ...)``."""
    for _ in range(6):
        yield expr
        nxt: ast.AST | None = None
        if isinstance(expr, ast.Name):
            nxt = ctx.binding(expr)
        elif isinstance(expr, ast.Attribute):
            nxt = _self_attribute_value(ctx, expr)
        elif isinstance(expr, ast.Call) and expr.args and _callee(expr) == "Subset":
            nxt = expr.args[0]
        if nxt is None:
            return
        expr = nxt


def _mapped_elements(ctx: FileContext, expr: ast.AST) -> list[ast.expr] | None:
    """The datasets a one-argument lambda is mapped over, when ``expr`` is its parameter.

    ``apply_to_collection(self.datasets, Dataset, lambda x: DataLoader(x))`` or
    ``map(lambda d: DataLoader(d), [ds_a, ds_b])``: the lambda is a generic loader factory and
    its parameter ranges over the elements of the collection passed in the same call. Only a
    collection the file spells out (a list/tuple literal, through names and ``self.x`` bound
    once) counts; anything else stays unknown.
    """
    if not isinstance(expr, ast.Name):
        return None
    fn = ctx.function_of(expr)
    if not isinstance(fn, ast.Lambda) or [a.arg for a in fn.args.args] != [expr.id]:
        return None
    call = ctx.parent(fn)
    if not isinstance(call, ast.Call) or fn not in call.args:
        return None
    for arg in call.args:
        if arg is fn:
            continue
        for value in _binding_chain(ctx, arg):
            if isinstance(value, (ast.List, ast.Tuple)) and value.elts:
                if any(isinstance(e, ast.Starred) for e in value.elts):
                    return None
                return list(value.elts)
    return None


def _element_kind(ctx: FileContext, expr: ast.AST) -> str | None:
    """ "memory" or "iterable" when a dataset expression is known to be one of those, else None."""
    chain = list(_binding_chain(ctx, expr))
    if any(_is_in_memory(ctx, e) for e in chain):
        return "memory"
    if any(_is_iterable_dataset_call(ctx, e) for e in chain):
        return "iterable"
    return None


def _self_attribute_value(ctx: FileContext, attr: ast.Attribute) -> ast.expr | None:
    """The value of ``self.x`` when the enclosing class assigns ``self.x`` exactly once."""
    if not (isinstance(attr.value, ast.Name) and attr.value.id == "self"):
        return None
    cls = ctx.enclosing(attr, ast.ClassDef)
    if cls is None:
        return None
    found: list[ast.expr] = []
    for node in ctx.walk(cls):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and dotted(t) == dotted(attr):
                    found.append(node.value)
    return found[0] if len(found) == 1 else None


_CONTAINERS = (ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp, ast.DictComp)


def _is_in_memory(ctx: FileContext, expr: ast.AST) -> bool:
    """A dataset of values already in memory: tensors (``TensorDataset``), Python containers,
    ``range``, or a class of this file whose ``__getitem__`` only indexes its own attributes."""
    if isinstance(expr, _CONTAINERS):
        return True
    if not isinstance(expr, ast.Call):
        return False
    if ctx.qualname(expr.func) in _TENSOR_DATASETS:
        return True
    if (
        isinstance(expr.func, ast.Name)
        and expr.func.id in ("range", "list", "tuple")
        and expr.func.id not in ctx.imports.names
    ):
        return True
    if isinstance(expr.func, ast.Name):  # ``dataset = partial(ReverseDataset, 10, 16)``; ``dataset(n)``
        bound = ctx.binding(expr.func)
        if isinstance(bound, ast.Call) and ctx.qualname(bound.func) == "functools.partial" and bound.args:
            return _is_in_memory(ctx, ast.Call(func=bound.args[0], args=[], keywords=[]))
    if isinstance(expr.func, ast.Name):
        local = [c for c in ctx.of(ast.ClassDef) if c.name == expr.func.id]
        if local:  # a Dataset class of this file
            return any(indexes_own_data(c) for c in local)
    view = ctx.project
    if view is not None and view.imports_project:
        resolved = view.resolve(expr.func)  # a Dataset class of another project module
        return resolved is not None and holds_its_data(resolved.cls)
    return False


#: Calls that only reshape or convert data already in memory.
_CHEAP_FUNCS = frozenset({"len", "int", "float", "min", "max", "range", "slice", "tuple", "list", "abs"})
_CHEAP_METHODS = frozenset(
    {
        "clone",
        "long",
        "float",
        "int",
        "view",
        "reshape",
        "unsqueeze",
        "squeeze",
        "item",
        "size",
        "numel",
        "contiguous",
        "detach",
        # wrapping or flipping a slice that is already in memory (``torch.tensor(ts[a:b])``,
        # ``torch.flip(x, dims=(0,))``, ``arr.astype(np.float32)``): microseconds per sample
        "tensor",
        "as_tensor",
        "from_numpy",
        "flip",
        "astype",
    }
)


def indexes_own_data(cls: ast.ClassDef) -> bool:
    """``__getitem__`` only slices the instance's own attributes (``return self.data[i]``,
    possibly through locals and cheap conversions) and calls nothing that reads files or
    transforms samples: an in-memory dataset."""
    for item in cls.body:
        if isinstance(item, ast.FunctionDef) and item.name == "__getitem__":
            indexes_self = False
            for node in ast.walk(item):
                if isinstance(node, ast.Call):
                    func = node.func
                    if isinstance(func, ast.Name) and func.id in _CHEAP_FUNCS:
                        continue
                    if isinstance(func, ast.Attribute) and func.attr in _CHEAP_METHODS:
                        continue
                    return False
                if (
                    isinstance(node, ast.Subscript)
                    and isinstance(node.value, ast.Attribute)
                    and isinstance(node.value.value, ast.Name)
                    and node.value.value.id == "self"
                ):
                    indexes_self = True
            return indexes_self
    return False


def is_test_module(filename: str) -> bool:
    """A test module by its own name (``test_*.py``, ``*_test.py``), wherever it lives."""
    leaf = filename.replace("\\", "/").rsplit("/", 1)[-1]
    return leaf.startswith("test_") or leaf.endswith("_test.py")


def is_test_file(filename: str) -> bool:
    """Test code (:func:`is_test_module`, ``conftest.py``, files under ``tests/``):
    performance advice about its loaders is noise."""
    if is_test_module(filename):
        return True
    parts = filename.replace("\\", "/").split("/")
    if parts[-1] == "conftest.py":
        return True
    return any(p in ("tests", "testing") for p in parts[:-1])


def _says_evaluation(ctx: FileContext, expr: ast.AST) -> bool:
    """A dataset expression that names an evaluation split (``val_ds``, ``MNIST(train=False)``)."""
    if isinstance(expr, ast.Name):
        return is_evaluation_name(expr.id)
    if isinstance(expr, ast.Attribute):
        return is_evaluation_name(expr.attr)
    if isinstance(expr, ast.Subscript):
        key = expr.slice
        return isinstance(key, ast.Constant) and isinstance(key.value, str) and is_evaluation_name(key.value)
    if isinstance(expr, ast.Call):
        for kw in expr.keywords:
            if kw.arg == "train" and ctx.value(kw.value) is False:
                return True
            if kw.arg in ("split", "subset", "mode"):
                v = ctx.value(kw.value)
                if isinstance(v, str) and is_evaluation_name(v):
                    return True
    return False


def _moves_to_device(ctx: FileContext, expr: ast.AST) -> bool:
    """Whether a dataset expression builds its tensors on a device (``TensorDataset(x.cuda())``)."""
    if not isinstance(expr, ast.Call):
        return False
    nodes: list[ast.AST] = list(ctx.walk(expr))
    for arg in [*expr.args, *(k.value for k in expr.keywords)]:
        if isinstance(arg, ast.Name):
            bound = ctx.binding(arg)
            if bound is not None:
                nodes.extend(ctx.walk(bound))
    for n in nodes:
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("cuda", "to"):
            return True
        if isinstance(n, ast.keyword) and n.arg == "device":
            return True
    return False


def _is_iterable_dataset_call(ctx: FileContext, expr: ast.AST) -> bool:
    """A call of an ``IterableDataset`` subclass defined in this file."""
    if not isinstance(expr, ast.Call) or not isinstance(expr.func, ast.Name):
        return False
    for cls in ctx.of(ast.ClassDef):
        if cls.name == expr.func.id:
            for base in cls.bases:
                text = dotted(base) or ""
                if text.endswith("IterableDataset"):
                    return True
    return False


def _is_lightning_train_hook(ctx: FileContext, fn: ast.AST) -> bool:
    """``def train_dataloader(self)`` of a LightningModule/DataModule: the trainer iterates it
    once per epoch (it is built once unless ``reload_dataloaders_every_n_epochs`` is set)."""
    if getattr(fn, "name", "") != "train_dataloader":
        return False
    cls = ctx.parent(fn)
    if not isinstance(cls, ast.ClassDef):
        return False
    for base in cls.bases:
        text = dotted(base) or ""
        if text.endswith(("LightningModule", "LightningDataModule")):
            return True
    return False


def loader_index(ctx: FileContext) -> LoaderIndex:
    """The (cached) loader analysis of one file."""
    return ctx.shared("loaders", LoaderIndex)


def literal_false(node: object) -> bool:
    """Whether an argument node is the literal ``False`` (a fix may flip it in place)."""
    return isinstance(node, ast.Constant) and node.value is False


def known(value: object) -> bool:
    return value is not UNKNOWN and value is not MISSING


def drives_training(ctx: FileContext) -> bool:
    """Whether the file trains (:func:`file_trains`) or drives training done elsewhere: an epoch
    loop (``for epoch in range(...)``) around calls such as ``engine.train_one_epoch(...)``.

    Questions about other project modules are only asked in such files, so library code that
    merely imports its siblings never pays for reading them."""
    if file_trains(ctx):
        return True
    for loop in ctx.of(ast.For):
        target = loop.target
        if isinstance(target, ast.Name) and "epoch" in target.id.lower():
            return True
    return False


def may_build_loaders(ctx: FileContext) -> bool:
    """Whether the file constructs a DataLoader, or drives training and imports project modules
    that may build one."""
    if ctx.calls_to(DATALOADER):
        return True
    view = ctx.project
    return view is not None and view.imports_project and drives_training(ctx)


def iter_training_loaders(ctx: FileContext) -> Iterable[Loader]:
    """Training loaders of a file that trains (see :func:`file_trains`), in source order.

    Test files (:func:`is_test_file`) have none: performance advice on test loaders is noise.
    """
    if is_test_file(ctx.filename) or not may_build_loaders(ctx) or not drives_training(ctx):
        return []
    index = loader_index(ctx)
    return index.training_loaders()
