"""Whether a loader's dataset holds its samples in memory, told through the functions of the
file: a dataset a function returns (``return TensorDataset(...)``), a name rebound to in-memory
datasets in every branch, a parameter every caller fills with one. Asked by
:class:`~traindoctor.facts.data.static.LoaderIndex` for each construction it reads; the name
flow (bindings, calls of the file's functions) is the index's."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Protocol

from traindoctor.facts.data.datasets import binding_chain, is_in_memory
from traindoctor.facts.data.training import callee_name

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import FuncDef

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


class NameFlow(Protocol):
    """The name-flow answers of a file's loader index that these questions need."""

    ctx: FileContext

    def resolve_scope(self, ref: ast.Name) -> ast.AST | None: ...

    def live_stores(self, ref: ast.Name, scope: ast.AST, depth: int = 0) -> list[ast.AST]: ...

    def exclusive(self, a: ast.AST, b: ast.AST) -> bool: ...

    def defs_called_by(self, call: ast.Call) -> tuple[list[FuncDef], bool]: ...

    def call_sites(self, fn: FuncDef) -> list[ast.Call]: ...

    def param_for(self, fn: FuncDef, call: ast.Call, arg: ast.AST, method: bool) -> ast.arg | None: ...


class DatasetMemory:
    """In-memory datasets followed through the functions of one file."""

    def __init__(self, index: NameFlow) -> None:
        self.index = index

    def returned(self, expr: ast.AST, depth: int = 0) -> bool:
        """A dataset returned by a function of this file whose every ``return`` gives an
        in-memory dataset: ``feats = prepare_features(model, imgs)`` (``return
        TensorDataset(...)``), or ``dataset, model, opt = load_train_objs()`` (``return
        MyTrainDataset(2048), model, optimizer``)."""
        ctx = self.index.ctx
        if depth > 2:
            return False
        index: int | None = None
        call: ast.AST | None = expr
        if isinstance(expr, ast.Name):
            scope = self.index.resolve_scope(expr)
            stores = self.index.live_stores(expr, scope) if scope is not None else []
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
        if callee_name(call) == "random_split" and call.args:  # ``train_ds, val_ds = random_split(ds, ...)``
            chain = list(binding_chain(ctx, call.args[0]))
            return (
                any(is_in_memory(ctx, e) for e in chain)
                or self.passed(chain[-1], depth + 1)
                or self.returned(chain[-1], depth + 1)
            )
        defs, _method = self.index.defs_called_by(call)
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
            chain = list(binding_chain(ctx, value))
            if not (any(is_in_memory(ctx, e) for e in chain) or self.returned(chain[-1], depth + 1)):
                return False
        return True

    def rebound(self, expr: ast.AST) -> bool:
        """A name bound several times (``ds = load_dataset(...)`` in one branch,
        ``ds = TensorDataset(...)`` in the other) whose bindings that can reach this use are all
        in-memory datasets."""
        ctx = self.index.ctx
        if not isinstance(expr, ast.Name):
            return False
        scope = self.index.resolve_scope(expr)
        if scope is None:
            return False
        live = [s for s in self.index.live_stores(expr, scope) if not self.index.exclusive(s, expr)]
        if not live:
            return False
        for store in live:
            stmt = ctx.statement_of(store)
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and stmt.targets[0] is store):
                return False
            if not any(is_in_memory(ctx, e) for e in binding_chain(ctx, stmt.value)):
                return False
        return True

    def passed(self, expr: ast.AST, depth: int = 0) -> bool:
        """``expr`` is a parameter of a function of this file, and every call of that function
        passes an in-memory dataset for it (``def make_loader(ds): return DataLoader(ds)``
        called as ``make_loader(TensorDataset(x, y))``)."""
        ctx = self.index.ctx
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
        for call in self.index.call_sites(fn):
            candidates = [*call.args, *(kw.value for kw in call.keywords)]
            found = [
                c
                for c in candidates
                if (p := self.index.param_for(fn, call, c, method)) is not None and p.arg == expr.id
            ]
            if len(found) != 1:
                return False  # not passed (default), or passed in a way we cannot tell
            passed.append(found[0])
        if not passed:
            return False
        for value in passed:
            chain = list(binding_chain(ctx, value))
            if not (
                any(is_in_memory(ctx, e) for e in chain)
                or self.passed(chain[-1], depth + 1)
                or self.returned(chain[-1])
            ):
                return False
        return True
