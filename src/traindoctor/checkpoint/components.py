"""One component's state, shared by the single-file format (``core``) and the sharded one (``sharded``).

A component (model, optimizer, scheduler, scaler, sampler, loader) is one object, a list/tuple or
a dict of them: :func:`state_of` takes its state and :func:`load_into` puts it back. An object
without ``state_dict()`` (a plain sampler or loader) keeps what can be read from it (epoch, seed,
generator state), marked ``position_known: False``. :class:`ResumeInfo` is what a load reports,
:func:`rank_and_world` where this process stands in ``torch.distributed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from traindoctor.unwrap import unwrap_model


@dataclass
class ResumeInfo:
    """What :func:`traindoctor.checkpoint.load` found: counters, ``extra``, and which components it restored."""

    path: str
    step: int | None = None
    epoch: int | None = None
    extra: Any = None
    restored: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    #: Why something could not be restored exactly (e.g. a position across world sizes).
    notes: list[str] = field(default_factory=list)


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) under ``torch.distributed``; ``(0, 1)`` without a process group."""
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def state_of(obj: Any, what: str) -> Any:
    """state_dict of one object, a list/tuple or a dict of objects (None stays None).

    ``what`` names the component in error messages; a model (``what`` starts with ``model``) is
    saved without its DDP and ``torch.compile`` wrappers.
    """
    if obj is None:
        return None
    if isinstance(obj, dict):
        return {str(k): state_of(v, f"{what}[{k!r}]") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [state_of(v, f"{what}[{i}]") for i, v in enumerate(obj)]
    if what.startswith("model"):
        obj = unwrap_model(obj)
    if hasattr(obj, "state_dict"):
        return obj.state_dict()
    return _foreign_data_state(obj, what)


def _foreign_data_state(obj: Any, what: str) -> dict[str, Any]:
    """Best effort for samplers/loaders that have no ``state_dict`` (epoch, generator)."""
    state: dict[str, Any] = {"kind": type(obj).__name__, "position_known": False}
    if hasattr(obj, "epoch"):
        state["epoch"] = int(obj.epoch)
    if hasattr(obj, "seed"):
        state["seed"] = int(obj.seed)
    generator = getattr(obj, "generator", None)
    if generator is not None and hasattr(generator, "get_state"):
        state["generator"] = generator.get_state()
    inner = getattr(obj, "sampler", None)
    if inner is not None and inner is not obj:
        state["sampler"] = state_of(inner, f"{what}.sampler")
    if len(state) == 2:
        raise TypeError(f"{what}: a {type(obj).__name__} has no state_dict() to save")
    return state


def load_into(obj: Any, state: Any, what: str) -> None:
    """Restore ``state`` (as :func:`state_of` took it) into ``obj``, one object, list or dict."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            load_into(value, state[str(key)], f"{what}[{key!r}]")
        return
    if isinstance(obj, (list, tuple)):
        if len(obj) != len(state):
            raise ValueError(f"{what}: checkpoint holds {len(state)} entries, got {len(obj)}")
        for index, (value, item) in enumerate(zip(obj, state)):
            load_into(value, item, f"{what}[{index}]")
        return
    foreign = isinstance(state, dict) and state.get("position_known") is False
    if hasattr(obj, "load_state_dict") and not foreign:
        obj.load_state_dict(state)
        return
    if "epoch" in state and hasattr(obj, "set_epoch"):
        obj.set_epoch(int(state["epoch"]))
    generator = getattr(obj, "generator", None)
    if "generator" in state and generator is not None:
        generator.set_state(state["generator"])
    inner = getattr(obj, "sampler", None)
    if "sampler" in state and inner is not None and inner is not obj:
        load_into(inner, state["sampler"], f"{what}.sampler")
