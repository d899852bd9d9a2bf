"""Optimizer recipes: weight-decay groups, learning-rate scaling, warmup.

These are the configurations that TD203, TD204, TD205 and TD206 point at. Each function builds
exactly what a careful user would write by hand (the same parameter objects, the same group
options, the same standard PyTorch schedulers), so using them never changes numerics.
"""

from __future__ import annotations

import fnmatch
import math
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Union

import torch
from torch import nn

from traindoctor.unwrap import unwrap_model

if TYPE_CHECKING:
    from torch.optim import Optimizer
    from torch.optim.lr_scheduler import LRScheduler

__all__ = [
    "NORM_TYPES",
    "effective_batch",
    "is_norm_module",
    "param_groups",
    "scale_lr",
    "unwrap_model",
    "warmup_schedule",
]

NoDecayPattern = Union[str, type]  # noqa: UP007 - a runtime alias; `str | type` is also fine on 3.10


def _norm_types() -> tuple[type, ...]:
    from torch.nn.modules.batchnorm import _NormBase  # BatchNorm*, SyncBatchNorm, InstanceNorm*, Lazy*

    types: list[type] = [_NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm]
    rms = getattr(nn, "RMSNorm", None)  # torch >= 2.4
    if rms is not None:
        types.append(rms)
    return tuple(types)


#: Module types whose parameters are never decayed (instances of subclasses count too).
NORM_TYPES: tuple[type, ...] = _norm_types()


def is_norm_module(module: nn.Module) -> bool:
    """True for BatchNorm, SyncBatchNorm, InstanceNorm, LayerNorm, GroupNorm, RMSNorm (and subclasses)."""
    return isinstance(module, NORM_TYPES)


def _no_weight_decay_names(model: nn.Module) -> set[str]:
    """Names listed by ``no_weight_decay()`` methods (timm's convention), as full parameter names.

    timm calls the method on the top-level model only; a submodule's method is honoured too, with
    its names taken relative to that submodule. An entry may name a parameter or a whole module,
    or be an ``fnmatch`` glob (``"blocks.*.gamma"``).
    """
    names: set[str] = set()
    for prefix, module in model.named_modules():
        method = getattr(module, "no_weight_decay", None)
        if not callable(method):
            continue
        listed = method()
        if isinstance(listed, str):
            listed = [listed]
        for entry in listed:
            names.add(f"{prefix}.{entry}" if prefix else str(entry))
    return names


def _is_glob(pattern: str) -> bool:
    return any(ch in pattern for ch in "*?[")


def _name_matches(name: str, pattern: str) -> bool:
    """Whether ``pattern`` selects parameter ``name``.

    A pattern with a wildcard (``*``, ``?``, ``[``) is an ``fnmatch`` glob over the full name.
    Otherwise it must equal a run of whole dotted components of the name: ``"bias"`` matches
    ``fc.bias`` but not ``fc.unbiased``; ``"encoder.norm"`` matches ``encoder.norm.weight``.
    """
    if _is_glob(pattern):
        return fnmatch.fnmatchcase(name, pattern)
    padded = f".{name}."
    return f".{pattern.strip('.')}." in padded


def _check_weight_decay(weight_decay: Any) -> float:
    if isinstance(weight_decay, bool) or not isinstance(weight_decay, (int, float)):
        raise TypeError(f"weight_decay must be a number, got {type(weight_decay).__name__}")
    if not math.isfinite(weight_decay) or weight_decay < 0:
        raise ValueError(f"weight_decay must be a finite number >= 0, got {weight_decay!r}")
    return weight_decay


def param_groups(
    model: nn.Module,
    weight_decay: float,
    *,
    no_decay: Iterable[NoDecayPattern] | None = None,
) -> list[dict[str, Any]]:
    """Optimizer parameter groups that decay only the weights that should be decayed.

    Not decayed: parameters of normalisation layers (``NORM_TYPES`` and their subclasses),
    parameters registered as ``bias``, every parameter of rank <= 1 (gains, shifts, scalars),
    names returned by ``no_weight_decay()`` methods (timm's convention), and whatever
    ``no_decay`` selects. ``no_decay`` holds name patterns (see ``_name_matches``: whole dotted
    components, or an ``fnmatch`` glob) and/or module types; an entry that selects nothing raises
    ``ValueError`` (a dead filter, TD205, is always a bug). Frozen parameters
    (``requires_grad=False``) are left out. Wrappers (DDP, ``torch.compile``) are looked through,
    and names are the unwrapped model's.

    Returns ``[{"params": decayed, "weight_decay": weight_decay}, {"params": others,
    "weight_decay": 0.0}]`` in ``model.named_parameters()`` order; an empty group is omitted.

    Example::

        optimizer = torch.optim.AdamW(param_groups(model, weight_decay=0.05), lr=1e-3)
    """
    weight_decay = _check_weight_decay(weight_decay)
    if not isinstance(model, nn.Module):
        raise TypeError(f"param_groups() needs an nn.Module, got {type(model).__name__}")
    model = unwrap_model(model)
    patterns: list[str] = []
    types: list[type] = []
    entries = [no_decay] if isinstance(no_decay, (str, type)) else list(no_decay or [])
    for entry in entries:
        if isinstance(entry, str):
            if not entry.strip(". "):
                raise ValueError("no_decay: an empty pattern would match nothing; remove it")
            patterns.append(entry)
        elif isinstance(entry, type) and issubclass(entry, nn.Module):
            types.append(entry)
        else:
            raise TypeError(f"no_decay entries must be name patterns (str) or nn.Module types, got {entry!r}")

    skip: set[int] = set()  # ids of parameters that must not be decayed
    used_types: set[type] = set()
    for module in model.modules():
        matched_types = [t for t in types if isinstance(module, t)]
        used_types.update(matched_types)
        own = dict(module.named_parameters(recurse=False))
        if matched_types:  # a listed type covers its submodules too
            skip.update(id(p) for p in module.parameters())
        elif is_norm_module(module):
            skip.update(id(p) for p in own.values())
        elif "bias" in own:
            skip.add(id(own["bias"]))

    named = list(model.named_parameters())
    listed = _no_weight_decay_names(model)
    used_patterns: set[str] = set()
    for name, param in named:
        if param.dim() <= 1:
            skip.add(id(param))
        if any(
            name == entry or name.startswith(entry + ".") or (_is_glob(entry) and fnmatch.fnmatchcase(name, entry))
            for entry in listed
        ):
            skip.add(id(param))
        for pattern in patterns:
            if _name_matches(name, pattern):
                used_patterns.add(pattern)
                skip.add(id(param))

    dead = [p for p in patterns if p not in used_patterns] + [t.__name__ for t in types if t not in used_types]
    if dead:
        examples = ", ".join(name for name, _ in named[:5])
        raise ValueError(
            f"no_decay entries {dead} match no parameter of {type(model).__name__} "
            f"(parameter names look like: {examples}{', ...' if len(named) > 5 else ''})"
        )

    decay = [p for _, p in named if p.requires_grad and id(p) not in skip]
    keep = [p for _, p in named if p.requires_grad and id(p) in skip]
    if not decay and not keep:
        raise ValueError(f"{type(model).__name__} has no trainable parameters (all requires_grad=False)")
    groups = []
    if decay:
        groups.append({"params": decay, "weight_decay": weight_decay})
    if keep:
        groups.append({"params": keep, "weight_decay": 0.0})
    return groups


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return value


# Optimizer class names (lower case, matched as substrings along the class's MRO).
_SQRT_FAMILY: Sequence[str] = ("adam", "lamb", "rmsprop", "adagrad", "adadelta", "adafactor")
_LINEAR_FAMILY: Sequence[str] = ("sgd", "lars", "momentum")


def _rule_for(optimizer: Any) -> str:
    if optimizer is None:
        raise ValueError(
            "scale_lr(rule='auto') needs optimizer= (an optimizer, its class or its name); "
            "or pass rule='linear' (SGD-like) or rule='sqrt' (Adam-family)"
        )
    if isinstance(optimizer, str):
        names = [optimizer.lower()]
    else:
        cls = optimizer if isinstance(optimizer, type) else type(optimizer)
        names = [c.__name__.lower() for c in cls.__mro__]
    for name in names:
        if any(key in name for key in _SQRT_FAMILY):
            return "sqrt"
        if any(key in name for key in _LINEAR_FAMILY):
            return "linear"
    raise ValueError(
        f"scale_lr cannot tell how to scale the learning rate of {names[0]!r}; "
        "pass rule='linear' (SGD-like) or rule='sqrt' (Adam-family)"
    )


def scale_lr(
    base_lr: float,
    base_batch: int,
    batch: int,
    *,
    optimizer: Any = None,
    rule: str = "auto",
) -> float:
    """The learning rate for ``batch`` samples per optimizer step, given one tuned for ``base_batch``.

    ``rule="linear"``: ``base_lr * batch / base_batch`` (SGD with momentum; Goyal et al. 2017,
    use it with warmup). ``rule="sqrt"``: ``base_lr * sqrt(batch / base_batch)`` (Adam-family
    and other adaptive optimizers; Malladi et al. 2022). ``rule="auto"`` picks from
    ``optimizer`` (an optimizer, its class, or a name such as ``"adamw"``): Adam, AdamW, NAdam,
    RAdam, Adamax, LAMB, RMSprop, Adagrad, Adadelta, Adafactor -> sqrt; SGD, LARS -> linear;
    anything else raises ``ValueError`` asking for an explicit rule.
    ``batch`` is the effective batch (see ``effective_batch``).

    Example::

        lr = scale_lr(1e-3, 256, effective_batch(64, accumulation=4), optimizer=torch.optim.AdamW)
    """
    lr = _positive("base_lr", base_lr)
    reference = _positive("base_batch", base_batch)
    samples = _positive("batch", batch)
    if rule == "auto":
        rule = _rule_for(optimizer)
    if rule == "linear":
        return lr * samples / reference
    if rule == "sqrt":
        return lr * math.sqrt(samples / reference)
    raise ValueError(f"rule must be 'auto', 'linear' or 'sqrt', got {rule!r}")


def _world_size() -> int:
    """World size from an initialised process group, else torchrun's ``WORLD_SIZE``, else 1."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    raw = os.environ.get("WORLD_SIZE", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def effective_batch(batch: int, accumulation: int = 1, world_size: int | None = None) -> int:
    """Samples per optimizer step: ``batch * accumulation * world_size``.

    ``world_size=None`` reads it from ``torch.distributed`` when a process group is initialised,
    else from the ``WORLD_SIZE`` variable that torchrun sets (so it is right before
    ``init_process_group`` too), else 1.

    Example::

        eff = effective_batch(args.batch_size, accumulation=args.accum)
    """
    for name, value in (("batch", batch), ("accumulation", accumulation)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if world_size is None:
        world_size = _world_size()
    elif isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    return batch * accumulation * world_size


def warmup_schedule(
    optimizer: Optimizer,
    warmup_steps: int,
    after: LRScheduler | None = None,
) -> LRScheduler:
    """Linear warmup over ``warmup_steps`` scheduler steps, then ``after`` (or a constant LR).

    It is PyTorch's ``LinearLR(start_factor=1/warmup_steps, total_iters=warmup_steps)``: after
    ``k`` scheduler steps the LR is ``lr * (1/W + (1 - 1/W) * min(k, W) / W)`` with
    ``W = warmup_steps``, i.e. ``lr / W`` for the first optimizer step and the full ``lr`` from
    step ``W`` on (Goyal et al. 2017 warm up linearly to the scaled LR). Then
    ``after`` takes over, counting its own steps from 0 (so give a cosine schedule
    ``T_max=total_steps - warmup_steps``). ``after`` must be built on the same optimizer before
    this call. The result is a standard ``LinearLR`` / ``SequentialLR``: its ``state_dict()``
    belongs in the checkpoint like any scheduler's. Call ``.step()`` once per optimizer step.
    ``warmup_steps=0`` returns ``after`` itself (or a ``ConstantLR`` with factor 1).

    Example::

        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total - 500)
        scheduler = warmup_schedule(optimizer, 500, after=cosine)
    """
    from torch.optim.lr_scheduler import ConstantLR, LinearLR, SequentialLR

    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an int >= 0, got {warmup_steps!r}")
    if after is not None and getattr(after, "optimizer", None) is not optimizer:
        raise ValueError("warmup_schedule(after=...) must be a scheduler of the same optimizer")
    if warmup_steps == 0:
        return after if after is not None else ConstantLR(optimizer, factor=1.0, total_iters=0)
    warmup = LinearLR(optimizer, start_factor=1.0 / warmup_steps, end_factor=1.0, total_iters=warmup_steps)
    if after is None:
        return warmup
    return SequentialLR(optimizer, [warmup, after], milestones=[warmup_steps])
