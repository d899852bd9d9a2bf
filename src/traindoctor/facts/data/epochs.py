"""Which ``.set_epoch(...)`` calls may set a DataLoader sampler's epoch.

``loader.sampler.set_epoch(epoch)``, ``sampler.set_epoch(epoch)`` and anything the checker cannot
attribute count (precision first: TD601 stays silent). An object reached through a ``.dataset``
attribute does not: ``loader.dataset.set_epoch(epoch)`` sets the dataset's own epoch (webdataset,
streaming datasets), and ``sampler = loader.dataset.prefetcher.sampler; sampler.set_epoch(epoch)``
the sampler of a prefetcher the dataset owns, never the DistributedSampler the loader draws from.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from traindoctor.static.names import receiver

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


def sets_sampler_epoch(ctx: FileContext, call: ast.Call) -> bool:
    """Whether the ``set_epoch`` call ``call`` may act on a loader's sampler (see the module docs)."""
    from traindoctor.facts.data.static import loader_index

    target = receiver(call)
    values: list[ast.expr] | None = [target]
    if isinstance(target, ast.Name):
        values = loader_index(ctx).reaching_values(target)
    if not values:
        return True
    return not all(owned_by_dataset(v) for v in values)


def owned_by_dataset(node: ast.expr) -> bool:
    """``x.dataset``, ``x.dataset.prefetcher.sampler``: an object a loader's dataset holds (both
    branches of a conditional expression)."""
    if isinstance(node, ast.IfExp):
        return owned_by_dataset(node.body) and owned_by_dataset(node.orelse)
    while isinstance(node, ast.Attribute):
        if node.attr == "dataset":
            return True
        node = node.value
    return False
