"""``save`` and ``load``: everything a resumed run needs, in a file that loads with weights_only.

The checkpoint is a dict of plain values (see ``docs/checkpoints.md``)::

    format, torch_version, step, epoch, world_size,
    model, optimizer, scheduler, scaler, sampler, loader,   # state_dicts (absent when not given)
    rng, rng_per_rank, extra

``model``/``optimizer``/``scheduler``/``scaler`` each accept one object, a list or a dict of them
(several optimizers, a GAN's two models). Under ``torch.distributed`` rank 0 writes the file once,
with every rank's RNG state in ``rng_per_rank``; each rank restores its own on ``load``.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traindoctor.checkpoint.atomic import atomic_write, prune, shift_backups
from traindoctor.checkpoint.state import capture_rng, check_plain, restore_rng
from traindoctor.unwrap import unwrap_model

FORMAT = "traindoctor.checkpoint/1"
COMPONENTS = ("model", "optimizer", "scheduler", "scaler", "sampler", "loader")


@dataclass
class ResumeInfo:
    """What :func:`load` found: counters, ``extra``, and which components it restored."""

    path: str
    step: int | None = None
    epoch: int | None = None
    extra: Any = None
    restored: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    #: Why something could not be restored exactly (e.g. a position across world sizes).
    notes: list[str] = field(default_factory=list)


def _dist() -> tuple[int, int]:
    import torch

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def _state_of(obj: Any, what: str) -> Any:
    """state_dict of one object, a list/tuple or a dict of objects (None stays None)."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return {str(k): _state_of(v, f"{what}[{k!r}]") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_state_of(v, f"{what}[{i}]") for i, v in enumerate(obj)]
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
        state["sampler"] = _state_of(inner, f"{what}.sampler")
    if len(state) == 2:
        raise TypeError(f"{what}: a {type(obj).__name__} has no state_dict() to save")
    return state


def _load_into(obj: Any, state: Any, what: str) -> None:
    if isinstance(obj, dict):
        for key, value in obj.items():
            _load_into(value, state[str(key)], f"{what}[{key!r}]")
        return
    if isinstance(obj, (list, tuple)):
        if len(obj) != len(state):
            raise ValueError(f"{what}: checkpoint holds {len(state)} entries, got {len(obj)}")
        for index, (value, item) in enumerate(zip(obj, state)):
            _load_into(value, item, f"{what}[{index}]")
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
        _load_into(inner, state["sampler"], f"{what}.sampler")


def _gather_rng(rng: dict[str, Any], world: int) -> list[dict[str, Any]]:
    import torch

    gathered: list[Any] = [None] * world
    torch.distributed.all_gather_object(gathered, rng)
    return gathered


def save(
    path: str | os.PathLike[str],
    *,
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    sampler: Any = None,
    loader: Any = None,
    step: int | None = None,
    epoch: int | None = None,
    extra: Any = None,
    keep_last: int | None = None,
    async_save: bool = False,
) -> Any:
    """Atomically write a full training checkpoint to ``path``; returns the path (rank 0).

    ``extra`` must be plain data (numbers, strings, tensors, dicts/lists of them).
    ``keep_last=N`` keeps the N newest files of ``path``'s naming pattern (``step_000120.pt``
    -> ``step_*.pt`` by number; a name without digits keeps ``last.pt.1`` .. ``last.pt.N-1``).

    A sharded model (FSDP2/DTensor parameters, DDP) is saved through
    ``torch.distributed.checkpoint`` into the directory ``path`` instead (every rank calls
    ``save``; see :mod:`traindoctor.checkpoint.sharded`); ``async_save=True`` writes it in the
    background and returns a handle whose ``wait()`` returns the committed path.
    """
    import torch

    from traindoctor.checkpoint import sharded

    if sharded.wants_sharded(model):
        return sharded.save(
            path,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            scaler=scaler,
            sampler=sampler,
            loader=loader,
            step=step,
            epoch=epoch,
            extra=extra,
            keep_last=keep_last,
            async_save=async_save,
        )
    if async_save:
        raise ValueError(
            "async_save=True is for sharded models (FSDP2/DTensor, DDP) under "
            "torch.distributed; a single-file checkpoint is written synchronously"
        )
    rank, world = _dist()
    rng = capture_rng()
    per_rank = _gather_rng(rng, world) if world > 1 else None
    if rank != 0:
        torch.distributed.barrier()
        return None
    payload: dict[str, Any] = {"format": FORMAT, "torch_version": str(torch.__version__), "world_size": world}
    if step is not None:
        payload["step"] = int(step)
    if epoch is not None:
        payload["epoch"] = int(epoch)
    for name, obj in (
        ("model", model),
        ("optimizer", optimizer),
        ("scheduler", scheduler),
        ("scaler", scaler),
        ("sampler", sampler),
        ("loader", loader),
    ):
        if obj is not None:
            payload[name] = _state_of(obj, name)
    payload["rng"] = rng
    if per_rank is not None:
        payload["rng_per_rank"] = per_rank
    if extra is not None:
        payload["extra"] = extra
    check_plain(payload)
    dest = Path(path)
    if keep_last is not None and keep_last > 1 and not any(c.isdigit() for c in dest.name):
        shift_backups(dest, keep_last)
    try:
        atomic_write(dest, payload)
        if keep_last is not None and any(c.isdigit() for c in dest.name):
            prune(dest, keep_last)
    finally:
        if world > 1:
            torch.distributed.barrier()
    return dest


def load(
    path: str | os.PathLike[str],
    *,
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    sampler: Any = None,
    loader: Any = None,
    map_location: Any = "cpu",
    strict: bool = True,
    rng: bool = True,
) -> ResumeInfo:
    """Restore a checkpoint written by :func:`save` (loaded with ``weights_only=True``).

    Components passed here but absent from the file are listed in ``info.missing`` and warned
    about: a resume that silently skips them is exactly the bug this module exists to prevent.
    """
    import torch

    from traindoctor.checkpoint import sharded

    if sharded.is_sharded_checkpoint(sharded.resolve(path)):
        return sharded.load(
            path,
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            scaler=scaler,
            sampler=sampler,
            loader=loader,
            strict=strict,
            rng=rng,
        )
    if sharded.wants_sharded(model):
        raise ValueError(
            f"{path}: not a sharded checkpoint directory, but the model is sharded "
            "(FSDP2/DTensor or DDP): it was written by a single process or by an "
            "older traindoctor; load it into the unwrapped model before sharding"
        )
    payload = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(payload, dict) or "model" not in payload:
        raise ValueError(f"{path}: not a traindoctor checkpoint (no 'model' entry)")
    info = ResumeInfo(path=str(path), step=payload.get("step"), epoch=payload.get("epoch"), extra=payload.get("extra"))
    models = model
    if not isinstance(models, (dict, list, tuple)):
        models = unwrap_model(model)
    if isinstance(models, dict):
        for key, module in models.items():
            unwrap_model(module).load_state_dict(payload["model"][str(key)], strict=strict)
    elif isinstance(models, (list, tuple)):
        for module, state in zip(models, payload["model"]):
            unwrap_model(module).load_state_dict(state, strict=strict)
    else:
        models.load_state_dict(payload["model"], strict=strict)
    info.restored.append("model")
    for name, obj in (
        ("optimizer", optimizer),
        ("scheduler", scheduler),
        ("scaler", scaler),
        ("sampler", sampler),
        ("loader", loader),
    ):
        if obj is None:
            continue
        if name not in payload:
            info.missing.append(name)
            continue
        _load_into(obj, payload[name], name)
        info.restored.append(name)
    if rng:
        rank, _world = _dist()
        per_rank = payload.get("rng_per_rank")
        state = per_rank[rank] if per_rank and rank < len(per_rank) else payload.get("rng")
        if state:
            info.restored.extend(f"rng:{r}" for r in restore_rng(state))
        else:
            info.missing.append("rng")
    if info.missing:
        warnings.warn(
            f"{path}: checkpoint has no state for {', '.join(info.missing)}; those restart from scratch", stacklevel=2
        )
    return info
