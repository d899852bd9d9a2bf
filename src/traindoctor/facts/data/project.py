"""The data facts a project module's summary holds about its functions and classes.

``utils.get_training_dataloader(...)`` builds and returns the DataLoader a training script iterates;
``engine.train_one_epoch(model, loader)`` runs the pass over it; ``datautils.MyTrainDataset`` holds
its samples in memory. The rules read those facts at the call in the checked file. They are
computed with the module's summary (:mod:`traindoctor.facts.data.summariser`) and filed under
:data:`DATA` in ``FunctionFacts.topics`` / ``ClassFacts.topics``; this module says what they are
and reads them.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traindoctor.static.args import MISSING, UNKNOWN, find_arg

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import ClassFacts, FunctionFacts, Place, Resolved

#: The topic the data facts are filed under in a summary.
DATA = "data"


@dataclass(frozen=True)
class LoaderFacts:
    """A ``DataLoader(...)`` a function builds and returns.

    ``keywords`` maps a DataLoader keyword to ``("value", v)`` (a known value), ``("param", name)``
    (the function's parameter ``name`` is passed through) or ``("unknown", None)``; a keyword that
    is not passed is absent (the DataLoader default applies).
    """

    place: Place
    keywords: Mapping[str, tuple[str, Any]]
    evaluation: bool
    in_memory: bool
    iterable: bool
    on_device: bool
    #: The shuffling ``DistributedSampler`` the loader draws its indices from, when the function
    #: builds it (``sampler=dist_sampler``, or the sampler of a ``BatchSampler``).
    distributed_sampler: Place | None = None


@dataclass(frozen=True)
class FunctionData:
    """What a project function does with data."""

    #: Runs without gradients or is an evaluation function without ``backward()``.
    evaluation: bool
    #: The DataLoader it returns, if it builds one (and only one).
    loader: LoaderFacts | None
    #: Every DataLoader construction the function may return: ``(None, facts)`` for the return
    #: value itself (one per branch that binds the returned name), ``(i, facts)`` for element
    #: ``i`` of a returned tuple or list (``return train_loader, val_loader``), ``(key, facts)``
    #: for a returned dict (``return {"train": train_loader}``).
    returns: tuple[tuple[int | str | None, LoaderFacts], ...] = ()
    #: The body calls ``.set_epoch(...)`` on something that may be a loader's sampler
    #: (``shuffle_dataset(loader, epoch)``); not on an object reached through a ``.dataset``.
    sets_epoch: bool = False
    #: Where the shuffling ``DistributedSampler`` the function returns is built
    #: (``create_sampler(ds, cfg)`` returning ``DistributedSampler(ds) if cfg.NUM_GPUS > 1 else None``).
    sampler: Place | None = None
    #: Parameters the function only reads attributes of (``loader.sampler``, ``len(loader)``):
    #: it neither iterates them nor hands them on.
    reads_only: frozenset[str] = frozenset()
    #: A dispatch on one of its parameters whose arms return differently shaped values
    #: (``if is_pretrain: return build_a(cfg)`` / ``return build_b(cfg)``): (the parameter, the
    #: arm's returns when it is true, when it is false); set only when :attr:`returns` cannot
    #: be told as a whole. A call that passes a constant picks the arm (:func:`switched_returns`).
    switched: (
        tuple[str, tuple[tuple[int | str | None, LoaderFacts], ...], tuple[tuple[int | str | None, LoaderFacts], ...]]
        | None
    ) = None


def switched_returns(data: FunctionData | None, value_of: Any) -> tuple[tuple[int | str | None, LoaderFacts], ...]:
    """The returns of the dispatch arm a call takes: ``value_of(param)`` is the value the call
    passes for the switch parameter (UNKNOWN or MISSING-free: the caller resolves defaults);
    empty when the value is not known."""
    from traindoctor.static.args import UNKNOWN

    if data is None or data.switched is None:
        return ()
    param, truthy, falsy = data.switched
    value = value_of(param)
    if value is UNKNOWN or not isinstance(value, (bool, int, str, type(None))):
        return ()
    return truthy if value else falsy


def function_data(fn: FunctionFacts | None) -> FunctionData | None:
    """The data facts of a project function (None: none were computed)."""
    return fn.topics.get(DATA) if fn is not None else None


def holds_its_data(cls: ClassFacts | None) -> bool:
    """Whether a project class is a Dataset whose ``__getitem__`` only indexes data it already
    holds (see ``indexes_own_data``): loader workers would not pay for themselves."""
    return cls is not None and bool(cls.topics.get(DATA))


def loader_keyword(
    resolved: Resolved, call: ast.Call, ctx: FileContext, name: str, facts: LoaderFacts | None = None
) -> Any:
    """The value a project loader factory passes for DataLoader keyword ``name`` at ``call``
    (for the construction ``facts`` when given, else the one loader it returns).

    MISSING when the factory does not pass it (the DataLoader default applies), UNKNOWN when the
    summary or the call site cannot tell, else the value.
    """
    fn = resolved.function
    data = function_data(fn)
    if facts is None and data is not None:
        facts = data.loader
    if fn is None or facts is None:
        return UNKNOWN
    fact = facts.keywords.get(name)
    if fact is None:
        return MISSING
    kind, value = fact
    if kind == "value":
        return value
    if kind != "param":
        return UNKNOWN
    node = find_arg(call, value, fn.positional, ctx)
    if node is MISSING:
        return fn.defaults.get(value, UNKNOWN)
    if node is UNKNOWN:
        return UNKNOWN
    return ctx.value(node)
