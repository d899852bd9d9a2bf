"""Keyword-or-positional argument lookup for calls of known torch callables.

``DataLoader(ds, 64, True, None, None, 4)`` passes ``num_workers=4`` positionally; rules ask
:func:`find_arg` for ``num_workers`` and get the ``4`` node either way. When an argument may hide
in ``*args`` or in an unknown ``**kwargs``, the answer is :data:`UNKNOWN` and rules stay silent.
"""

from __future__ import annotations

import ast
from typing import Union

from traindoctor.static.protocols import DictSource


class _Sentinel:
    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name

    def __bool__(self) -> bool:
        return False


#: The argument is not passed: the callee's default applies.
MISSING = _Sentinel("MISSING")
#: The argument may be passed but we cannot see how (``*args``, opaque ``**kwargs``).
UNKNOWN = _Sentinel("UNKNOWN")

ArgResult = Union[ast.expr, _Sentinel]  # noqa: UP007 - a runtime alias

#: Positional parameter order of the callables rules read (keyword-only ones are omitted).
SIGNATURES: dict[str, tuple[str, ...]] = {
    "torch.utils.data.DataLoader": (
        "dataset",
        "batch_size",
        "shuffle",
        "sampler",
        "batch_sampler",
        "num_workers",
        "collate_fn",
        "pin_memory",
        "drop_last",
        "timeout",
        "worker_init_fn",
        "multiprocessing_context",
        "generator",
    ),
    "torch.utils.data.DistributedSampler": (
        "dataset",
        "num_replicas",
        "rank",
        "shuffle",
        "seed",
        "drop_last",
    ),
    "torch.optim.SGD": ("params", "lr", "momentum", "dampening", "weight_decay", "nesterov"),
    "torch.optim.Adam": ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    "torch.optim.AdamW": ("params", "lr", "betas", "eps", "weight_decay", "amsgrad"),
    "transformers.AdamW": ("params", "lr", "betas", "eps", "weight_decay", "correct_bias"),
    "torch.optim.NAdam": ("params", "lr", "betas", "eps", "weight_decay", "momentum_decay"),
    "torch.optim.RAdam": ("params", "lr", "betas", "eps", "weight_decay"),
    "torch.optim.Adamax": ("params", "lr", "betas", "eps", "weight_decay"),
    "torch.optim.Adagrad": ("params", "lr", "lr_decay", "weight_decay"),
    "torch.optim.Adadelta": ("params", "lr", "rho", "eps", "weight_decay"),
    "torch.optim.RMSprop": ("params", "lr", "alpha", "eps", "weight_decay", "momentum", "centered"),
    "torch.autocast": ("device_type", "dtype", "enabled", "cache_enabled"),
    "torch.cuda.amp.autocast": ("enabled", "dtype", "cache_enabled"),
    "torch.cpu.amp.autocast": ("enabled", "dtype", "cache_enabled"),
    "torch.amp.GradScaler": ("device", "init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"),
    "torch.cuda.amp.GradScaler": ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled"),
    "torch.save": ("obj", "f", "pickle_module", "pickle_protocol"),
    "torch.load": ("f", "map_location", "pickle_module"),
    "torch.nn.utils.clip_grad_norm_": ("parameters", "max_norm", "norm_type"),
    "torch.nn.utils.clip_grad_value_": ("parameters", "clip_value"),
    "torch.nn.BatchNorm1d": ("num_features", "eps", "momentum", "affine", "track_running_stats"),
    "torch.nn.BatchNorm2d": ("num_features", "eps", "momentum", "affine", "track_running_stats"),
    "torch.nn.BatchNorm3d": ("num_features", "eps", "momentum", "affine", "track_running_stats"),
}


def find_arg(
    call: ast.Call,
    name: str,
    signature: tuple[str, ...] | None = None,
    ctx: DictSource | None = None,
) -> ArgResult:
    """The expression passed for parameter ``name``, or MISSING / UNKNOWN.

    ``signature`` is the positional order (see :data:`SIGNATURES`); without it only keywords are
    read. With a ``ctx``, a ``**kwargs`` whose dict the file defines literally is looked into.
    """
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    opaque = False
    if signature is not None and name in signature:
        index = signature.index(name)
        for i, arg in enumerate(call.args):
            if isinstance(arg, ast.Starred):
                opaque = True
                break
            if i == index:
                return arg
    elif any(isinstance(a, ast.Starred) for a in call.args):
        opaque = True
    for kw in call.keywords:
        if kw.arg is None:
            mapping = ctx.dict_literal(kw.value) if ctx is not None else None
            if mapping is None:
                alternatives = ctx.dict_alternatives(kw.value) if ctx is not None else None
                if alternatives is None or any(name in m for m in alternatives):
                    opaque = True  # an opaque dict, or one alternative passes it
            elif name in mapping:
                return mapping[name]
    return UNKNOWN if opaque else MISSING


def last_arg_end(call: ast.Call) -> tuple[int, int] | None:
    """(lineno, end_col_offset) just after the last argument, or None for ``f()``."""
    nodes: list[ast.expr | ast.keyword] = [*call.args, *call.keywords]
    if not nodes:
        return None
    last = max(nodes, key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0))
    return (last.end_lineno or 0, last.end_col_offset or 0)
