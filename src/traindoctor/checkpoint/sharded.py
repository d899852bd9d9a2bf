"""Sharded checkpoints: FSDP2 / DTensor and DDP models through ``torch.distributed.checkpoint``.

Why a directory: a sharded model's weights live in pieces on every rank, so one file written by
rank 0 holds rank 0's shards only (the silent bug this module exists to prevent). Here every rank
calls :func:`save`; model and optimizer state go through DCP's ``get_state_dict`` (which knows
FSDP2, DTensor and DDP) and ``dcp.save``, which writes each rank's shards plus a ``.metadata``
index of global shapes. traindoctor adds, in the same directory::

    train_state.pt   rank 0: format, step, epoch, world_size, scheduler, scaler, extra
    rank_<r>.pt      rank r: its RNG streams, its loader/sampler position
    traindoctor.json manifest (written last, by rank 0): what the checkpoint holds

The ``.pt`` files load with ``torch.load(weights_only=True)``. The directory is written as
``.<name>.tmp-<pid>-<rand>`` next to ``path`` and renamed to ``path`` by rank 0 only after every
rank's part is on disk (DCP writes ``.metadata`` after all ranks finished), so ``path`` is always
a complete checkpoint or absent. Replacing an existing ``path`` renames the old one aside first
(``.<name>.old-*`` or the ``keep_last`` backup ``<name>.1``); :func:`resolve` falls back to it
if a crash hit between the two renames.

Loading reshards: DCP fills the current model's sharding from the saved global tensors, so N
ranks' checkpoint loads on M ranks. Per-rank data is mapped as far as it can be and the rest is
named (see :func:`load`).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traindoctor.checkpoint.atomic import LAST_DIGITS, TMP_MARKER, fsync_dir, glob_escape, writer_alive
from traindoctor.checkpoint.components import ResumeInfo, load_into, rank_and_world, state_of
from traindoctor.checkpoint.dcp_load import load_checked
from traindoctor.checkpoint.dcp_metadata import MANIFEST, DcpMetadata, Manifest, read_manifest, read_metadata
from traindoctor.checkpoint.files import inside
from traindoctor.checkpoint.inspection import CheckpointReadError
from traindoctor.checkpoint.limits import Budget, Limits

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

SHARDED_FORMAT = "traindoctor.sharded/1"
COMMON_FILE = "train_state.pt"
OLD_MARKER = ".old-"


def rank_file(rank: int) -> str:
    return f"rank_{rank}.pt"


class ShardedStateError(ValueError):
    """State that cannot be saved correctly (named), raised before anything is written."""


# --------------------------------------------------------------------------- detection


def _distributed_ready() -> bool:
    import torch

    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _dtensor_param(module: nn.Module) -> str | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch built without distributed
        return None
    for name, param in module.named_parameters():
        if isinstance(param, DTensor):
            return name
    return None


def wants_sharded(model: Any) -> bool:
    """True for models whose state must go through DCP: DTensor parameters, DDP, FSDP1.

    A DTensor model without a process group is an error (its shards cannot be gathered), never
    a silently partial file.
    """
    items = (
        list(model.values())
        if isinstance(model, dict)
        else (list(model) if isinstance(model, (list, tuple)) else [model])
    )
    sharded: list[tuple[int, str, str | None]] = []
    for index, item in enumerate(items):
        kind = type(item).__name__
        if kind in ("DistributedDataParallel", "FullyShardedDataParallel"):
            sharded.append((index, kind, None))
        elif hasattr(item, "named_parameters"):
            name = _dtensor_param(item)
            if name is not None:
                sharded.append((index, kind, name))
    if not sharded:
        return False
    if len(items) != 1:
        raise ShardedStateError(
            f"model: a sharded checkpoint takes one root model (the FSDP/DDP-wrapped module); got {len(items)} models"
        )
    if not _distributed_ready():
        _, kind, name = sharded[0]
        what = f"parameter {name!r} is a DTensor" if name else f"it is a {kind}"
        raise ShardedStateError(
            f"model ({kind}): {what} but torch.distributed has no process group: the shards "
            "on other ranks cannot be saved; call checkpoint.save on every rank before "
            "destroy_process_group()"
        )
    return True


def _single(model: Any) -> Any:
    if isinstance(model, dict):
        return next(iter(model.values()))
    if isinstance(model, (list, tuple)):
        return model[0]
    return model


def _optimizers(optimizer: Any) -> list[Any]:
    if optimizer is None:
        return []
    if isinstance(optimizer, dict):
        return list(optimizer.values())
    if isinstance(optimizer, (list, tuple)):
        return list(optimizer)
    return [optimizer]


def _dcp_state(model: Any, optimizers: list[Any]) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_state_dict

    if optimizers:
        model_sd, optim_sd = get_state_dict(model, optimizers)
        return {"model": model_sd, "optimizer": optim_sd}
    return {"model": get_model_state_dict(model)}


# --------------------------------------------------------------------------- files


def _torch_save(obj: Any, path: Path) -> None:
    import torch

    with open(path, "wb") as fh:
        torch.save(obj, fh)
        fh.flush()
        os.fsync(fh.fileno())


def _rank_state(rank: int, sampler: Any, loader: Any) -> dict[str, Any]:
    from traindoctor.checkpoint.state import capture_rng, check_plain

    state: dict[str, Any] = {"rank": rank, "rng": capture_rng()}
    if sampler is not None:
        state["sampler"] = state_of(sampler, "sampler")
    if loader is not None:
        state["loader"] = state_of(loader, "loader")
    check_plain(state, f"rank {rank} state")
    return state


def _common_state(
    world: int, scheduler: Any, scaler: Any, step: int | None, epoch: int | None, extra: Any
) -> dict[str, Any]:
    import torch

    from traindoctor.checkpoint.state import check_plain

    state: dict[str, Any] = {"format": SHARDED_FORMAT, "torch_version": str(torch.__version__), "world_size": world}
    if step is not None:
        state["step"] = int(step)
    if epoch is not None:
        state["epoch"] = int(epoch)
    if scheduler is not None:
        state["scheduler"] = state_of(scheduler, "scheduler")
    if scaler is not None:
        state["scaler"] = state_of(scaler, "scaler")
    if extra is not None:
        state["extra"] = extra
    check_plain(state)
    return state


def _cleanup_stale(dest: Path) -> None:
    """Remove temporaries of dead writers and old versions left by an interrupted commit."""
    if not dest.parent.is_dir():
        return
    for entry in dest.parent.iterdir():
        name = entry.name
        if name.startswith(f".{dest.name}{TMP_MARKER}") and not writer_alive(entry):
            shutil.rmtree(entry, ignore_errors=True)
        elif name.startswith(f".{dest.name}{OLD_MARKER}") and dest.is_dir():
            shutil.rmtree(entry, ignore_errors=True)


def _backup_dirs(dest: Path) -> list[tuple[int, Path]]:
    """The backups ``dest.1``, ``dest.2`` ... of a digit-less ``dest``, newest first."""
    found = []
    for entry in dest.parent.glob(glob_escape(dest.name) + ".*"):
        suffix = entry.name[len(dest.name) + 1 :]
        if suffix.isdigit() and entry.is_dir():
            found.append((int(suffix), entry))
    return sorted(found)


def _rotate(dest: Path, keep_last: int | None) -> Path | None:
    """Move the current ``dest`` aside before the commit; return where it went (to delete).

    With ``keep_last`` and a digit-less name the backups shift up by one rename each
    (``dest.i`` -> ``dest.i+1``) and ``dest`` becomes ``dest.1``; nothing is deleted until the
    new directory is in place (:func:`_prune_backups`), so a kill here loses no checkpoint.
    """
    if not dest.exists():
        return None
    if keep_last is not None and keep_last > 1 and not LAST_DIGITS.search(dest.name):
        for index, older in reversed(_backup_dirs(dest)):
            os.replace(older, dest.with_name(f"{dest.name}.{index + 1}"))
        os.rename(dest, dest.with_name(f"{dest.name}.1"))
        return None
    aside = dest.with_name(f".{dest.name}{OLD_MARKER}{secrets.token_hex(4)}")
    os.rename(dest, aside)
    return aside


def _prune_backups(dest: Path, keep_last: int | None) -> None:
    """After the commit: keep the ``keep_last - 1`` newest backups of a digit-less ``dest``."""
    if keep_last is None or LAST_DIGITS.search(dest.name):
        return
    for _, old in _backup_dirs(dest)[max(0, keep_last - 1) :]:
        shutil.rmtree(old, ignore_errors=True)


def _prune_numbered(dest: Path, keep_last: int | None) -> None:
    """``keep_last`` for numbered names (``step_000120``): keep the highest-numbered ones."""
    import re

    if keep_last is None or not LAST_DIGITS.search(dest.name):
        return
    match = LAST_DIGITS.search(dest.name)
    assert match is not None
    head, tail = dest.name[: match.start()], dest.name[match.end() :]
    pattern = re.compile(re.escape(head) + r"(\d+)" + re.escape(tail) + r"\Z")
    found = sorted(
        (int(m.group(1)), p) for p in dest.parent.iterdir() if (m := pattern.match(p.name)) and (p / MANIFEST).is_file()
    )
    for _, old in found[: max(0, len(found) - max(1, keep_last))]:
        if old != dest:
            shutil.rmtree(old, ignore_errors=True)


def _commit(tmp: Path, dest: Path, manifest: dict[str, Any], keep_last: int | None) -> None:
    """Rank 0, after every rank's part is on disk: manifest, then rename into place."""
    with open(tmp / MANIFEST, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    fsync_dir(tmp)
    aside = _rotate(dest, keep_last)
    os.rename(tmp, dest)
    fsync_dir(dest.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    _prune_backups(dest, keep_last)
    _prune_numbered(dest, keep_last)


# --------------------------------------------------------------------------- save


class PendingCheckpoint:
    """An ``async_save`` in flight. ``wait()`` returns the path once it is committed.

    Training continues while the shards are written (DCP stages a CPU copy first); rank 0
    commits the directory (rename) when DCP reports every rank's part written. Until then
    ``path`` holds the previous checkpoint. The next ``save`` waits for this one first; call
    :func:`traindoctor.checkpoint.wait` before ``destroy_process_group()``.
    """

    def __init__(self, path: Path, future: Any, commit: Any) -> None:
        self.path = path
        self._future = future
        self._commit = commit
        self._done = threading.Event()
        self._error: BaseException | None = None
        future.add_done_callback(self._finish)

    def _finish(self, future: Any) -> None:
        try:
            future.result()
            if self._commit is not None:
                self._commit()
        except BaseException as exc:  # reported by wait()
            self._error = exc
        finally:
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Path:
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self.path}: async checkpoint not written after {timeout} s")
        if self._error is not None:
            raise self._error
        return self.path


_PENDING: list[PendingCheckpoint] = []
_ASYNC_GROUP: Any = None


def wait_pending() -> None:
    """Wait for every ``async_save`` of this process; raise the first error."""
    while _PENDING:
        _PENDING.pop(0).wait()


def _async_group() -> Any:
    """A gloo group of its own for the background writes, so they never interleave with the
    training's collectives on the default group (created on the first async save, by every
    rank, as ``new_group`` requires)."""
    global _ASYNC_GROUP
    import torch.distributed as dist

    if _ASYNC_GROUP is None:
        _ASYNC_GROUP = dist.new_group(backend="gloo")
    return _ASYNC_GROUP


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
    """Every rank calls this. Returns the committed path, or a :class:`PendingCheckpoint`."""
    import torch.distributed as dist
    from torch.distributed.checkpoint import state_dict_saver

    wait_pending()
    rank, world = dist.get_rank(), dist.get_world_size()
    dest = Path(path)
    if dest.exists() and not dest.is_dir():
        raise ShardedStateError(f"{dest}: a sharded checkpoint is a directory, and a file is in the way")
    model = _single(model)
    optimizers = _optimizers(optimizer)
    # Everything is captured and checked before anything is written.
    state = _dcp_state(model, optimizers)
    common = _common_state(world, scheduler, scaler, step, epoch, extra) if rank == 0 else None
    mine = _rank_state(rank, sampler, loader)
    if rank == 0:
        # Before the new temporary exists (this process's pending saves are done).
        _cleanup_stale(dest)
    name = [f".{dest.name}{TMP_MARKER}{os.getpid()}-{secrets.token_hex(4)}" if rank == 0 else None]
    dist.broadcast_object_list(name, src=0)
    tmp = dest.parent / str(name[0])
    error = None
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        _torch_save(mine, tmp / rank_file(rank))
        if common is not None:
            _torch_save(common, tmp / COMMON_FILE)
    except OSError as exc:
        error = f"rank {rank}: {type(exc).__name__}: {exc}"
    errors: list[Any] = [None] * world
    dist.all_gather_object(errors, error)
    failed = [e for e in errors if e]
    if failed:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise OSError(f"{dest}: checkpoint not written: {'; '.join(failed)}")
    manifest = {
        "format": SHARDED_FORMAT,
        "world_size": world,
        "step": step,
        "epoch": epoch,
        "components": sorted(
            ["model", *(["optimizer"] if optimizers else [])]
            + [
                n
                for n, o in (("scheduler", scheduler), ("scaler", scaler), ("sampler", sampler), ("loader", loader))
                if o is not None
            ]
            + ["rng"]
            + (["extra"] if extra is not None else [])
        ),
        "optimizers": len(optimizers),
        "model_class": type(model).__name__,
        "async": bool(async_save),
    }

    def commit() -> None:
        _commit(tmp, dest, manifest, keep_last)

    if async_save:
        future = state_dict_saver.async_save(state, checkpoint_id=str(tmp), process_group=_async_group())
        pending = PendingCheckpoint(dest, future, commit if rank == 0 else None)
        _PENDING.append(pending)
        return pending
    state_dict_saver.save(state, checkpoint_id=str(tmp))
    if rank == 0:
        commit()
    dist.barrier()
    return dest


# --------------------------------------------------------------------------- load


def is_sharded_checkpoint(path: str | os.PathLike[str]) -> bool:
    p = Path(path)
    return p.is_dir() and ((p / MANIFEST).is_file() or (p / ".metadata").exists())


def resolve(path: str | os.PathLike[str]) -> Path:
    """``path``, or the version an interrupted commit moved aside (with a warning)."""
    dest = Path(path)
    if dest.exists() or not dest.parent.is_dir():
        return dest
    aside = sorted(p for p in dest.parent.glob(f".{dest.name}{OLD_MARKER}*") if (p / MANIFEST).is_file())
    first = dest.with_name(f"{dest.name}.1")
    if not aside and (first / MANIFEST).is_file():
        aside = [first]  # a rotating commit interrupted between its two renames
    if aside:
        warnings.warn(
            f"{dest}: missing (a save was interrupted between its two renames); "
            f"loading the previous version {aside[-1].name}",
            stacklevel=3,
        )
        return aside[-1]
    return dest


def _torch_load(path: Path, budget: Budget | None = None) -> Any:
    """``torch.load`` of one of traindoctor's files in a sharded checkpoint, after traindoctor's
    reader found it inside the checkpoint, within the limits, and naming no unsafe global."""
    import torch

    from traindoctor.checkpoint.file_inspect import check_before_load

    target = inside(path.parent, path.name, path.name)
    # a fresh budget per file: its clock must not count the time DCP took for the shards
    check_before_load(str(target), Budget(budget.limits if budget else None))
    return torch.load(target, map_location="cpu", weights_only=True)


def _checked_directory(dest: Path, budget: Budget) -> tuple[DcpMetadata, Manifest | None]:
    """``dest``'s ``.metadata`` and manifest, checked before DCP or torch read anything."""
    try:
        meta = read_metadata(dest, budget)
        manifest = read_manifest(dest, budget)
    except CheckpointReadError as exc:
        raise CheckpointReadError(f"{dest}: {exc}; refusing to unpickle it") from None
    if meta.unsafe:
        bad = sorted({u.ref.dotted for u in meta.unsafe})
        raise CheckpointReadError(
            f"{dest}: .metadata references {', '.join(bad[:10])}: not DCP metadata; refusing to unpickle it"
        )
    return meta, manifest


def load(
    path: str | os.PathLike[str],
    *,
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    scaler: Any = None,
    sampler: Any = None,
    loader: Any = None,
    strict: bool = True,
    rng: bool = True,
    limits: Limits | None = None,
) -> ResumeInfo:
    """Every rank calls this; the model may be sharded differently from the saving run.

    ``.metadata``, ``traindoctor.json`` and traindoctor's ``.pt`` files are checked first (see
    :func:`_checked_directory`): a checkpoint that names unsafe globals, places a shard outside
    its folder or goes past ``limits`` is refused with a :class:`CheckpointReadError`.
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_state_dict,
    )

    from traindoctor.checkpoint.state import restore_rng

    wait_pending()
    dest = resolve(path)
    if not dest.is_dir():
        raise FileNotFoundError(f"{dest}: no sharded checkpoint here")
    budget = Budget(limits)
    meta, manifest = _checked_directory(dest, budget)
    entries = {fqn for fqn, _ in meta.tensors} | set(meta.scalars)
    saved_world = manifest.world_size if manifest else None
    rank, world = rank_and_world()
    model = _single(model)
    optimizers = _optimizers(optimizer)
    use_optim = bool(optimizers) and any(k.startswith("optimizer.") for k in entries)
    state = _dcp_state(model, optimizers if use_optim else [])
    load_checked(state, dest, meta.data)
    options = StateDictOptions(strict=strict)
    if use_optim:
        set_state_dict(
            model, optimizers, model_state_dict=state["model"], optim_state_dict=state["optimizer"], options=options
        )
    else:
        set_model_state_dict(model, state["model"], options=options)
    common = _torch_load(dest / COMMON_FILE, budget) if (dest / COMMON_FILE).is_file() else {}
    info = ResumeInfo(path=str(dest), step=common.get("step"), epoch=common.get("epoch"), extra=common.get("extra"))
    info.restored.append("model")
    if optimizers:
        (info.restored if use_optim else info.missing).append("optimizer")
    for name, obj in (("scheduler", scheduler), ("scaler", scaler)):
        if obj is None:
            continue
        if name in common:
            load_into(obj, common[name], name)
            info.restored.append(name)
        else:
            info.missing.append(name)
    own = dest / rank_file(rank)
    mine = _torch_load(own, budget) if own.is_file() else None
    for name, obj in (("sampler", sampler), ("loader", loader)):
        if obj is None:
            continue
        if saved_world is not None and saved_world != world:
            message = _load_resharded_position(dest, name, obj, saved_world, world)
            if message is None:
                info.restored.append(name)
            else:
                info.missing.append(f"{name} position")
                info.notes.append(message)
        elif mine is not None and name in mine:
            load_into(obj, mine[name], name)
            info.restored.append(name)
        else:
            info.missing.append(name)
    if rng:
        if mine is not None and mine.get("rng"):
            info.restored.extend(f"rng:{r}" for r in restore_rng(mine["rng"]))
        else:
            info.missing.append("rng")
            info.notes.append(
                f"rank {rank} has no saved RNG streams: the checkpoint was "
                f"written by {saved_world} rank(s); its random draws (dropout, "
                "augmentation) start from this run's seed"
            )
    if info.missing:
        detail = "".join(f"\n  {n}" for n in info.notes)
        warnings.warn(
            f"{dest}: checkpoint has no state for {', '.join(info.missing)} on rank "
            f"{rank}; those restart from scratch{detail}",
            stacklevel=3,
        )
    return info


def _rank_files(dest: Path) -> set[int]:
    """The ranks whose ``rank_<r>.pt`` is in ``dest`` (listed, never probed rank by rank)."""
    found = set()
    for entry in os.scandir(dest):
        stem, _, rank = entry.name.removesuffix(".pt").partition("_")
        if stem == "rank" and entry.name.endswith(".pt") and rank.isdigit() and entry.is_file():
            found.add(int(rank))
    return found


def _load_resharded_position(dest: Path, name: str, obj: Any, saved_world: int, world: int) -> str | None:
    """Move a data position saved on ``saved_world`` ranks to ``world`` ranks, or say why not."""
    present = sorted(r for r in _rank_files(dest) if r < saved_world)
    states = [_torch_load(dest / rank_file(r)).get(name) for r in present]
    states = [s for s in states if s is not None]
    if not states:
        return f"{name}: no saved position"
    first = states[0]
    if not (
        isinstance(first, dict)
        and first.get("kind") == "ResumableLoader"
        and hasattr(obj, "load_state_dict")
        and type(obj).__name__ == "ResumableLoader"
    ):
        kind = first.get("kind", "?") if isinstance(first, dict) else "?"
        if hasattr(obj, "set_epoch") and isinstance(first, dict) and "epoch" in first:
            obj.set_epoch(int(first["epoch"]))
        return (
            f"{name} ({kind}): its position cannot be moved from {saved_world} to {world} "
            "rank(s): the sampler deals samples out by world size, so the order of the "
            "interrupted epoch changes; that epoch restarts from its beginning "
            "(use traindoctor.checkpoint.ResumableLoader to continue it exactly)"
        )
    keys = {(s.get("epoch"), s.get("global_samples_done")) for s in states}
    if len(keys) != 1:
        return (
            f"{name}: the {saved_world} ranks were at different positions "
            f"({sorted(keys)}); a position for {world} rank(s) is not defined"
        )
    obj.load_state_dict(first)
    return None
