"""The data topic's share of a project module's summary (:class:`DataSummariser`).

For each top-level function: whether it evaluates and the DataLoader it builds and returns (with
the keywords it passes, or passes through from its own parameters); for each top-level class:
whether it is a Dataset that holds its samples in memory. The engine hands :data:`DATA_SUMMARISER` to
the project model; :mod:`traindoctor.facts.data.project` says what the facts are and reads them.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from traindoctor.facts.data.project import DATA, FunctionData, LoaderFacts
from traindoctor.facts.data.static import (
    DATALOADER,
    indexes_own_data,
    is_evaluation_name,
    loader_index,
    under_no_grad,
)
from traindoctor.static.args import MISSING, UNKNOWN
from traindoctor.static.project import place_of

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import FuncDef, FunctionFacts

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
        return FunctionData(evaluation=evaluation, loader=returned_loader(ctx, node, params))

    def cls(self, ctx: FileContext, node: ast.ClassDef) -> bool:
        """Whether the class is a Dataset that only indexes data it already holds."""
        return indexes_own_data(node)


DATA_SUMMARISER = DataSummariser()


def returned_loader(ctx: FileContext, fn: FuncDef, params: set[str]) -> LoaderFacts | None:
    """The ``DataLoader(...)`` that ``fn`` builds and returns (None: it returns something else too)."""
    calls = [c for c in ctx.calls_to(DATALOADER) if ctx.within(c, fn)]
    if not calls:
        return None
    returned: list[ast.Call] = []
    for sub in ast.walk(fn):
        if isinstance(sub, ast.Return) and sub.value is not None and ctx.function_of(sub) is fn:
            value: ast.AST | None = sub.value
            if isinstance(value, ast.Name):
                value = ctx.binding(value)
            if isinstance(value, ast.Call) and any(value is c for c in calls):
                returned.append(value)
            else:
                return None  # returns something else too: not a plain factory
    if len(returned) != 1:
        return None
    call = returned[0]
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
    )
