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
import pickle
import warnings
from pathlib import Path
from typing import Any

from traindoctor.checkpoint.atomic import atomic_write
from traindoctor.checkpoint.components import ResumeInfo, load_into, rank_and_world, state_of
from traindoctor.checkpoint.files import open_regular
from traindoctor.checkpoint.inspection import CheckpointReadError
from traindoctor.checkpoint.limits import Budget, Limits
from traindoctor.checkpoint.state import capture_rng, check_plain, restore_rng
from traindoctor.unwrap import unwrap_model

FORMAT = "traindoctor.checkpoint/1"
COMPONENTS = ("model", "optimizer", "scheduler", "scaler", "sampler", "loader")


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
    rank, world = rank_and_world()
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
            payload[name] = state_of(obj, name)
    payload["rng"] = rng
    if per_rank is not None:
        payload["rng_per_rank"] = per_rank
    if extra is not None:
        payload["extra"] = extra
    check_plain(payload)
    dest = Path(path)
    try:
        atomic_write(dest, payload, keep_last=keep_last)
    finally:
        if world > 1:
            torch.distributed.barrier()
    return dest


def _weights_only_refusal(exc: Exception) -> str:
    """torch's long "Weights only load failed ..." message, down to its reason."""
    text = str(exc)
    marker = "WeightsUnpickler error:"
    reason = text.split(marker, 1)[1].strip().split("\n\n", 1)[0] if marker in text else text[:200]
    return f"torch.load(weights_only=True) refused it: {reason.strip()}"


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
    limits: Limits | None = None,
) -> ResumeInfo:
    """Restore a checkpoint written by :func:`save` (loaded with ``weights_only=True``).

    Components passed here but absent from the file are listed in ``info.missing`` and warned
    about: a resume that silently skips them is exactly the bug this module exists to prevent.
    The file (or a sharded checkpoint directory) is read by traindoctor's own reader first,
    within ``limits``: one that names an unsafe global, goes past a limit or is not a regular
    file (a FIFO, a device) is refused with a ``CheckpointReadError`` before torch reads it.
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
            limits=limits,
        )
    if sharded.wants_sharded(model):
        raise ValueError(
            f"{path}: not a sharded checkpoint directory, but the model is sharded "
            "(FSDP2/DTensor or DDP): it was written by a single process or by an "
            "older traindoctor; load it into the unwrapped model before sharding"
        )
    if os.path.exists(path):
        from traindoctor.checkpoint.file_inspect import check_before_load

        check_before_load(os.fspath(path), Budget(limits))
        with open_regular(path) as fh:
            try:
                payload = torch.load(fh, map_location=map_location, weights_only=True)
            except pickle.UnpicklingError as exc:
                raise CheckpointReadError(f"{path}: {_weights_only_refusal(exc)}") from None
    else:
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
        load_into(obj, payload[name], name)
        info.restored.append(name)
    if rng:
        rank, _world = rank_and_world()
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
