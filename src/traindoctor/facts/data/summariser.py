"""The data topic's share of a project module's summary (:class:`DataSummariser`).

For each top-level function: whether it evaluates and the DataLoader it builds and returns (with
the keywords it passes, or passes through from its own parameters); for each top-level class:
whether it is a Dataset that holds its samples in memory. The engine hands :data:`DATA_SUMMARISER` to
the project model; :mod:`traindoctor.facts.data.project` says what the facts are and reads them.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, cast

from traindoctor.facts.data.project import DATA, FunctionData, LoaderFacts
from traindoctor.facts.data.static import (
    DATALOADER,
    DISTRIBUTED_SAMPLER,
    indexes_own_data,
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
        """Whether the function evaluates, and the DataLoader it returns."""
        no_grad = under_no_grad(ctx, node.body[0]) if node.body else False
        evaluation = not facts.backward and (no_grad or is_evaluation_name(node.name))
        params = set(facts.positional) | set(facts.keyword_only)
        returns = returned_loaders(ctx, node, params)
        single = returns[0][1] if len(returns) == 1 and returns[0][0] is None else None
        sets_epoch = any(ctx.within(c, node) for c in ctx.method_calls("set_epoch"))
        return FunctionData(evaluation=evaluation, loader=single, returns=returns, sets_epoch=sets_epoch)

    def cls(self, ctx: FileContext, node: ast.ClassDef) -> bool:
        """Whether the class is a Dataset that only indexes data it already holds."""
        return indexes_own_data(node)


DATA_SUMMARISER = DataSummariser()


def returned_loaders(ctx: FileContext, fn: FuncDef, params: set[str]) -> tuple[tuple[int | None, LoaderFacts], ...]:
    """Every ``DataLoader(...)`` construction of ``fn`` that it may return, with the position in
    the returned tuple (None: the return value itself).

    A returned name bound in several branches (``if ...: loader = DataLoader(a) else: loader =
    DataLoader(b)``) gives one entry per construction; ``return train_dl, val_dl`` gives one per
    tuple element that is a loader. Empty when any return may give something else in a loader's
    place: every ``return`` must have the same shape (all plain, or tuples of one length).
    """
    calls = [c for c in ctx.calls_to(DATALOADER) if ctx.within(c, fn)]
    if not calls:
        return ()
    ids = {id(c) for c in calls}
    found: dict[int, tuple[int | None, ast.Call]] = {}
    width: int | None = -1  # -1: no return seen yet; None: plain returns; n: tuples of n
    for sub in ast.walk(fn):
        if not (isinstance(sub, ast.Return) and sub.value is not None and ctx.function_of(sub) is fn):
            continue
        value = sub.value
        shape = len(value.elts) if isinstance(value, ast.Tuple) else None
        if width != -1 and shape != width:
            return ()
        width = shape
        if isinstance(value, ast.Tuple):
            if any(isinstance(e, ast.Starred) for e in value.elts):
                return ()
            for i, elt in enumerate(value.elts):
                for call in _loader_calls(ctx, elt, ids) or ():
                    found.setdefault(id(call), (i, call))
            continue
        built = _loader_calls(ctx, value, ids)
        if not built:
            return ()  # returns something else too: not a plain factory
        for call in built:
            found.setdefault(id(call), (None, call))
    return tuple((i, _facts(ctx, call, params)) for i, call in found.values())


def _loader_calls(ctx: FileContext, value: ast.expr, ids: set[int]) -> list[ast.Call] | None:
    """The DataLoader constructions ``value`` evaluates to: the call itself, or every value bound
    to the name when each one is a construction (None: something else may be returned)."""
    if isinstance(value, ast.Call):
        return [value] if id(value) in ids else None
    if not isinstance(value, ast.Name):
        return None
    bound = ctx.bindings_of(value)
    if not bound or not all(isinstance(b, ast.Call) and id(b) in ids for b in bound):
        return None
    return [cast(ast.Call, b) for b in bound]


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
        distributed_sampler=_distributed_sampler(ctx, call),
    )


def _distributed_sampler(ctx: FileContext, call: ast.Call) -> Place | None:
    """Where the shuffling ``DistributedSampler`` that the loader ``call`` draws from is built in
    this file (``sampler=s``, ``sampler=s if dist else None``, ``batch_sampler=BatchSampler(s, ...)``)."""
    samplers = {id(c): c for c in ctx.calls_to(DISTRIBUTED_SAMPLER)}
    if not samplers:
        return None
    given = ctx.arg(call, "sampler")
    node: ast.expr | None = given if isinstance(given, ast.expr) else None
    if node is None:
        found = ctx.arg(call, "batch_sampler")
        batch = ctx.binding(found) if isinstance(found, ast.Name) else found
        node = batch.args[0] if isinstance(batch, ast.Call) and batch.args else None
    if isinstance(node, ast.Name):
        node = ctx.binding(node)
    choices = [node.body, node.orelse] if isinstance(node, ast.IfExp) else [node]
    for choice in choices:
        bound = ctx.binding(choice) if isinstance(choice, ast.Name) else choice
        sampler = samplers.get(id(bound))
        if sampler is not None and ctx.arg_value(sampler, "shuffle", default=True) is True:
            return place_of(ctx, sampler)
    return None
