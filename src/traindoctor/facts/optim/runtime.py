"""Audit of a live optimizer's parameter groups against the model's modules (TD204, TD205, TD308).

Every parameter the optimizer holds is mapped, by object identity, to its owning module and its
registered name inside the root models the session saw running forward. A parameter is a
*no-decay* parameter when its owning module is a normalisation layer (BatchNorm, SyncBatchNorm,
InstanceNorm, LayerNorm, GroupNorm, RMSNorm or a subclass), when the module registered it as
``bias``, or when its rank is <= 1 (gains, shifts, per-channel scales: the convention of timm
and nanoGPT). Names are only used to *print* evidence, never to classify.

Imports torch (through the recipes) lazily: call these functions from monitors only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from traindoctor.runtime.live import fields_repr

#: Parameter names listed in evidence at most.
MAX_NAMES = 10


class ParamOwner:
    __slots__ = ("local", "module", "name")

    name: str
    module: Any
    local: str

    def __init__(self, name: str, module: Any, local: str) -> None:
        self.name = name
        self.module = module
        self.local = local

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)


class DecayAudit:
    """The result of :func:`audit_optimizer`."""

    __slots__ = ("decayed", "decays", "empty_zero_groups", "groups", "no_decay_total")

    #: (name, kind) of no-decay parameters that sit in a group with weight_decay > 0, in model order.
    decayed: list[tuple[str, str]]
    #: All no-decay parameters the optimizer holds.
    no_decay_total: int
    #: weight_decay of the groups that decay no-decay parameters.
    decays: list[float]
    #: Indices of groups with weight_decay == 0 that hold no parameters while another group decays.
    empty_zero_groups: list[int]
    groups: int

    def __init__(self, groups: int = 0) -> None:
        self.decayed = []
        self.no_decay_total = 0
        self.decays = []
        self.empty_zero_groups = []
        self.groups = groups

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for _, kind in self.decayed:
            out[kind] = out.get(kind, 0) + 1
        return dict(sorted(out.items()))

    def names(self) -> list[str]:
        return [name for name, _ in self.decayed[:MAX_NAMES]]


def live_models(session: Any) -> list[Any]:
    """Root modules the session knows, in a deterministic order (by first parameter name count)."""
    models = []
    try:
        models = list(session.models)
    except Exception:
        pass
    models.sort(key=lambda m: (type(m).__name__, id(m)))
    return models


def owners(models: Iterable[Any]) -> dict[int, ParamOwner]:
    """``id(param) -> ParamOwner`` for every parameter registered in ``models`` (first wins)."""
    out: dict[int, ParamOwner] = {}
    for model in models:
        try:
            named = model.named_modules(remove_duplicate=False)
        except Exception:
            continue
        for prefix, module in named:
            for local, p in module._parameters.items():
                if p is None or id(p) in out:
                    continue
                name = f"{prefix}.{local}" if prefix else local
                out[id(p)] = ParamOwner(_strip_wrappers(name), module, local)
    return out


def _strip_wrappers(name: str) -> str:
    for prefix in ("module.", "_orig_mod."):
        while name.startswith(prefix):
            name = name[len(prefix) :]
    return name


def no_decay_kind(p: Any, owner: ParamOwner | None) -> str | None:
    """``"norm"``, ``"bias"``, ``"1-d"`` or None (a parameter that should be decayed)."""
    from traindoctor.recipes.optim import NORM_TYPES

    if owner is not None:
        if isinstance(owner.module, NORM_TYPES):
            return "norm"
        if owner.local == "bias":
            return "bias"
    if p.dim() <= 1:
        return "1-d"
    return None


def _weight_decay(group: dict[str, Any]) -> float:
    try:
        return float(group.get("weight_decay", 0.0) or 0.0)
    except (TypeError, ValueError):
        return 0.0


def audit_optimizer(optimizer: Any, session: Any) -> DecayAudit:
    """Which no-decay parameters the optimizer decays (see module docstring)."""
    table = owners(live_models(session))
    audit = DecayAudit(groups=len(optimizer.param_groups))
    any_decay = any(_weight_decay(g) > 0 for g in optimizer.param_groups)
    order = {pid: i for i, pid in enumerate(table)}
    decayed: list[tuple[int, str, str]] = []
    for gi, group in enumerate(optimizer.param_groups):
        wd = _weight_decay(group)
        params = group.get("params", [])
        if wd == 0 and not params and any_decay:
            audit.empty_zero_groups.append(gi)
        for pi, p in enumerate(params):
            if not getattr(p, "requires_grad", True):
                continue  # frozen: it gets no gradient, so the optimizer never decays it
            owner = table.get(id(p))
            kind = no_decay_kind(p, owner)
            if kind is None:
                continue
            audit.no_decay_total += 1
            if wd > 0:
                name = owner.name if owner else f"param_groups[{gi}]['params'][{pi}]"
                decayed.append((order.get(id(p), len(order) + pi), name, kind))
                if wd not in audit.decays:
                    audit.decays.append(wd)
    decayed.sort(key=lambda t: t[0])
    audit.decayed = [(name, kind) for _, name, kind in decayed]
    return audit


def declared_patterns(value: Any) -> list[str]:
    """The user's no-decay patterns from a threshold value: a list or a comma-separated string."""
    if value is None:
        return []
    if isinstance(value, str):
        items = value.split(",")
    else:
        try:
            items = list(value)
        except TypeError:
            return []
    return [str(item).strip() for item in items if str(item).strip()]


def half_params(optimizer: Any, session: Any) -> tuple[int, int, list[str]]:
    """(float16 parameters, all parameters, first names) held by the optimizer."""
    import torch

    table: dict[int, ParamOwner] | None = None
    half = total = 0
    names: list[str] = []
    for gi, group in enumerate(optimizer.param_groups):
        for pi, p in enumerate(group.get("params", [])):
            total += 1
            if p.dtype is torch.float16:
                half += 1
                if len(names) < MAX_NAMES:
                    if table is None:
                        table = owners(live_models(session))
                    owner = table.get(id(p))
                    names.append(owner.name if owner else f"param_groups[{gi}]['params'][{pi}]")
    return half, total, names
