"""The data topic's share of a project module's summary (:class:`DataSummariser`).

For each top-level function: whether it evaluates and the DataLoader it builds and returns (with
the keywords it passes, or passes through from its own parameters); for each top-level class:
whether it is a Dataset that holds its samples in memory. The engine hands :data:`DATA_SUMMARISER` to
the project model; :mod:`traindoctor.facts.data.project` says what the facts are and reads them.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from traindoctor.facts.data.epochs import sets_sampler_epoch
from traindoctor.facts.data.factories import returns_of
from traindoctor.facts.data.project import DATA, FunctionData, LoaderFacts
from traindoctor.facts.data.static import (
    DISTRIBUTED_SAMPLER,
    indexes_own_data,
    inert_read,
    is_evaluation_name,
    loader_index,
    under_no_grad,
)
from traindoctor.static.args import MISSING, UNKNOWN
from traindoctor.static.project import place_of

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import FuncDef, FunctionFacts, Place

#: DataLoader keywords whose value a loader factory's summary records.
LOADER_KEYWORDS = ("batch_size", "num_workers", "pin_memory", "persistent_workers", "shuffle", "sampler", "drop_last")


class DataSummariser:
    """What the data rules need to know about the functions and classes of other project modules."""

    topic = DATA

    def function(self, ctx: FileContext, node: FuncDef, facts: FunctionFacts) -> FunctionData:
        """Whether the function evaluates, the DataLoaders and the sampler it returns, and whether
        it sets a sampler's epoch."""
        no_grad = under_no_grad(ctx, node.body[0]) if node.body else False
        evaluation = not facts.backward and (no_grad or is_evaluation_name(node.name))
        returns = returned_loaders(ctx, node)
        single = returns[0][1] if len(returns) == 1 and returns[0][0] is None else None
        sets_epoch = any(ctx.within(c, node) and sets_sampler_epoch(ctx, c) for c in ctx.method_calls("set_epoch"))
        sampler = returns_of(ctx, _facts).sampler(node) if _may_return_sampler(ctx, node) else None
        return FunctionData(
            evaluation=evaluation,
            loader=single,
            returns=returns,
            sets_epoch=sets_epoch,
            sampler=sampler,
            reads_only=_reads_only(ctx, node, (*facts.positional, *facts.keyword_only)),
            switched=returns_of(ctx, _facts).switched(node) if not returns and _returns_a_call(node) else None,
        )

    def cls(self, ctx: FileContext, node: ast.ClassDef) -> bool:
        """Whether the class is a Dataset that only indexes data it already holds."""
        return indexes_own_data(node)


DATA_SUMMARISER = DataSummariser()


def returned_loaders(ctx: FileContext, fn: FuncDef) -> tuple[tuple[int | str | None, LoaderFacts], ...]:
    """Every ``DataLoader(...)`` construction ``fn`` may return, with its index or key in the
    returned tuple, list or dict (None: the return value itself): built by ``fn`` or by a
    function it returns the value of (see :mod:`traindoctor.facts.data.factories`)."""
    if not any(
        isinstance(r, ast.Return) and isinstance(r.value, (ast.Call, ast.Name, ast.Tuple, ast.List, ast.Dict))
        for r in ast.walk(fn)
    ):
        return ()
    return returns_of(ctx, _facts).loaders(fn)


def _returns_a_call(fn: FuncDef) -> bool:
    """A cheap filter for a dispatch: ``fn``'s body holds an ``if`` and it returns some value."""
    return (
        bool(fn.body)
        and any(isinstance(s, ast.If) for s in fn.body)
        and any(isinstance(r, ast.Return) and r.value is not None for r in ast.walk(fn))
    )


def _reads_only(ctx: FileContext, fn: FuncDef, params: tuple[str, ...]) -> frozenset[str]:
    """The parameters of ``fn`` whose every use is an attribute read or an inert builtin call
    (see :func:`~traindoctor.facts.data.static.inert_read`), never rebound."""
    out = set()
    for param in params:
        if param in ("self", "cls"):
            continue
        loads = [n for n in ctx.names_by_id.get(param, ()) if ctx.within(n, fn)]
        if loads and all(isinstance(n.ctx, ast.Load) and inert_read(ctx, n) for n in loads):
            out.add(param)
    return frozenset(out)


def _may_return_sampler(ctx: FileContext, fn: FuncDef) -> bool:
    """A cheap filter: the module builds a DistributedSampler or ``fn`` returns a call's value."""
    if ctx.calls_to(DISTRIBUTED_SAMPLER):
        return True
    return any(isinstance(r, ast.Return) and r.value is not None for r in ast.walk(fn)) and bool(ctx.project)


def _facts(ctx: FileContext, call: ast.Call, params: set[str]) -> LoaderFacts:
    keywords: dict[str, tuple[str, Any]] = {}
    for name in LOADER_KEYWORDS:
        node = ctx.arg(call, name)
        if node is MISSING:
            continue
        if node is UNKNOWN:
            keywords[name] = ("unknown", None)
        elif isinstance(node, ast.Name) and node.id in params and ctx.bindings_of(node) == [None]:
            keywords[name] = ("param", node.id)
        else:
            value = ctx.value(node)
            keywords[name] = ("unknown", None) if value is UNKNOWN else ("value", value)
    loader = loader_index(ctx).loader_of(call)
    return LoaderFacts(
        place=place_of(ctx, call),
        keywords=keywords,
        evaluation=loader is None or loader.evaluation_dataset or loader.built_for_evaluation,
        in_memory=loader is not None and loader.in_memory,
        iterable=loader is not None and loader.iterable,
        on_device=loader is not None and loader.on_device,
        distributed_sampler=distributed_sampler(ctx, call),
    )


def distributed_sampler(ctx: FileContext, call: ast.Call) -> Place | None:
    """Where the shuffling ``DistributedSampler`` that the loader ``call`` draws from is built
    (``sampler=s``, ``sampler=s if dist else None``, ``batch_sampler=BatchSampler(s, ...)``, a
    helper that returns one: ``sampler=create_sampler(ds, cfg)``)."""
    given = ctx.arg(call, "sampler")
    node: ast.expr | None = given if isinstance(given, ast.expr) else None
    if node is None:
        found = ctx.arg(call, "batch_sampler")
        batch = ctx.binding(found) if isinstance(found, ast.Name) else found
        node = batch.args[0] if isinstance(batch, ast.Call) and batch.args else None
    if node is None or isinstance(node, ast.Constant):
        return None
    return returns_of(ctx, _facts).sampler_place(node)
