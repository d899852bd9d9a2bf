"""Data-loading recipes: DataLoader keyword arguments for this machine, and seeding.

``loader_kwargs`` answers TD101, TD102, TD103, TD104 and TD603; ``seed_everything`` and
``worker_init_fn`` give reproducible, distinct random streams to every worker of every rank.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from traindoctor.machine import usable_cores

__all__ = [
    "MAX_DEFAULT_WORKERS",
    "default_workers",
    "loader_kwargs",
    "local_ranks",
    "seed_everything",
    "usable_cores",
    "worker_init_fn",
]

#: Upper bound of the computed worker count: beyond this, workers rarely make a loader faster
#: but every one costs a process and its memory. Measure with ``traindoctor tune`` to go higher.
MAX_DEFAULT_WORKERS = 8

# Set by seed_everything(workers=True); inherited by spawned processes through the environment.
_SEED_WORKERS_ENV = "TRAINDOCTOR_SEED_WORKERS"
_GLOBAL_SEED_ENV = "TRAINDOCTOR_GLOBAL_SEED"

# DataLoader options a tuned file may set (plain values only: no datasets, samplers or callables).
_TUNABLE: dict[str, type[Any] | tuple[type[Any], ...]] = {
    "num_workers": int,
    "pin_memory": bool,
    "persistent_workers": bool,
    "prefetch_factor": int,
    "multiprocessing_context": str,
    "pin_memory_device": str,
    "in_order": bool,
    "timeout": (int, float),
}


def local_ranks() -> int:
    """Training processes on this machine: ``LOCAL_WORLD_SIZE`` (set by torchrun), else 1."""
    raw = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def default_workers(cores: int, ranks: int) -> int:
    """``min(MAX_DEFAULT_WORKERS, max(0, cores // ranks - 1))`` for ``ranks`` local ranks.

    Each rank gets an equal share of the cores and keeps one of them for its own main process
    (the training loop); the rest become loader workers. This is the count that TD104/TD603
    recommend, capped so that a 128-core machine does not start 127 processes per rank.
    """
    return min(MAX_DEFAULT_WORKERS, max(0, cores // max(1, ranks) - 1))


def _is_in_memory(dataset: Any) -> bool:
    """A dataset whose items are ready-made tensors: workers would only add IPC cost (TD102)."""
    from torch.utils.data import TensorDataset

    return isinstance(dataset, (TensorDataset, torch.Tensor))


def _is_iterable(dataset: Any) -> bool:
    from torch.utils.data import IterableDataset

    return isinstance(dataset, IterableDataset)


def _read_tuned(tuned: Any) -> dict[str, Any]:
    if isinstance(tuned, Mapping):
        document: Any = tuned
        source = "tuned mapping"
    else:
        path = Path(os.fspath(tuned))
        source = str(path)
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"loader_kwargs(tuned=...): {source} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"loader_kwargs(tuned=...): cannot read {source}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"loader_kwargs(tuned=...): {source} is not valid JSON: {exc}") from None
    recommended = document.get("recommended") if isinstance(document, Mapping) else None
    if not isinstance(recommended, Mapping):
        raise ValueError(f"loader_kwargs(tuned=...): {source} has no 'recommended' object")
    out: dict[str, Any] = {}
    for key in sorted(recommended):
        value = recommended[key]
        expected = _TUNABLE.get(key)
        if expected is None:
            raise ValueError(
                f"loader_kwargs(tuned=...): {source}: 'recommended' has {key!r}, which is not a "
                f"DataLoader option this file may set (allowed: {', '.join(sorted(_TUNABLE))})"
            )
        if value is None and key in ("prefetch_factor", "multiprocessing_context"):
            out[key] = None
            continue
        if (isinstance(value, bool) and expected is not bool) or not isinstance(value, expected):
            raise ValueError(f"loader_kwargs(tuned=...): {source}: {key}={value!r} has the wrong type")
        if (key in ("num_workers", "timeout") and value < 0) or (key == "prefetch_factor" and value < 1):
            raise ValueError(f"loader_kwargs(tuned=...): {source}: {key}={value!r} is out of range")
        out[key] = value
    return out


def loader_kwargs(
    dataset: Any = None,
    *,
    device: Any = None,
    local_world_size: int | None = None,
    tuned: Any = None,
) -> dict[str, Any]:
    """DataLoader keyword arguments for this machine: ``DataLoader(ds, batch_size=..., **loader_kwargs(ds))``.

    - ``num_workers``: ``default_workers(usable_cores(), local ranks)``, i.e.
      ``min(8, max(0, cores // local_ranks - 1))`` where ``cores`` is this process's affinity
      mask and ``local_ranks`` is ``local_world_size`` (default: ``LOCAL_WORLD_SIZE``, else 1).
      0 for in-memory tensors (``TensorDataset``: workers would only add IPC) and for an
      ``IterableDataset`` (each worker gets a full copy and, unless the dataset shards itself by
      ``get_worker_info()``, yields every sample once per worker; set workers yourself, or
      through ``tuned=``, once yours does).
    - ``pin_memory``: True only when batches go to a CUDA device (``device``, default: CUDA if
      available).
    - ``persistent_workers``: True exactly when there are workers (never re-spawned per epoch).
    - ``worker_init_fn``: ``worker_init_fn`` when there are workers and ``seed_everything(...,
      workers=True)`` was called in this process.
    - ``tuned``: a JSON file path (or an already-loaded mapping) whose ``recommended`` object holds
      measured DataLoader options (``num_workers``, ``pin_memory``, ``prefetch_factor``, ...);
      they override the computed values, and the result is kept consistent (no
      ``persistent_workers``/``prefetch_factor`` without workers).

    Example::

        train_loader = DataLoader(train_set, batch_size=64, shuffle=True, **loader_kwargs(train_set))
    """
    from traindoctor.recipes.amp import device_of

    if local_world_size is None:
        local_world_size = local_ranks()
    elif isinstance(local_world_size, bool) or not isinstance(local_world_size, int) or local_world_size < 1:
        raise ValueError(f"local_world_size must be a positive int, got {local_world_size!r}")
    dev = device_of(device, "loader_kwargs")
    if _is_in_memory(dataset) or _is_iterable(dataset):
        workers = 0
    else:
        workers = default_workers(usable_cores(), local_world_size)
    kwargs: dict[str, Any] = {
        "num_workers": workers,
        "pin_memory": dev.type == "cuda",
        "persistent_workers": workers > 0,
    }
    if tuned is not None:
        measured = _read_tuned(tuned)
        kwargs.update(measured)
        workers = kwargs["num_workers"]
        if workers == 0:
            kwargs["persistent_workers"] = False
            kwargs.pop("prefetch_factor", None)
        elif "persistent_workers" not in measured:
            kwargs["persistent_workers"] = True
    if kwargs["num_workers"] > 0 and os.environ.get(_SEED_WORKERS_ENV) == "1":
        kwargs["worker_init_fn"] = worker_init_fn
    return kwargs


def _check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an int in [0, 2**63), got {seed!r}")
    return seed


def _seed_all(seed: int) -> None:
    random.seed(seed)
    try:
        import numpy as np
    except ImportError:  # numpy is optional
        pass
    else:
        np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device


def seed_everything(seed: int, *, workers: bool = True) -> int:
    """Seed Python's ``random``, NumPy's global RNG (if installed) and torch (CPU and CUDA).

    Every rank is seeded with the same ``seed``: the model is initialised identically everywhere
    (which matters wherever parameters are not broadcast from rank 0), and the samplers shuffle
    alike. Randomness that must differ between ranks is the data pipeline's, and that is what
    ``workers=True`` gives: from now on ``loader_kwargs`` adds ``worker_init_fn`` to loaders with
    workers, which makes every worker's stream distinct per worker *and* per rank while staying
    reproducible. (The setting lives in the ``TRAINDOCTOR_SEED_WORKERS`` environment variable so
    child processes inherit it.) NumPy gets ``seed % 2**32``. Returns ``seed``.
    ``PYTHONHASHSEED`` cannot be changed from inside a running interpreter; set it in the
    environment if set iteration order matters to you.

    Example::

        seed_everything(1234)
        loader = DataLoader(train_set, batch_size=64, shuffle=True, **loader_kwargs(train_set))
    """
    seed = _check_seed(seed)
    _seed_all(seed)
    os.environ[_GLOBAL_SEED_ENV] = str(seed)
    if workers:
        os.environ[_SEED_WORKERS_ENV] = "1"
    else:
        os.environ.pop(_SEED_WORKERS_ENV, None)
    return seed


def _global_rank() -> int:
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    raw = os.environ.get("RANK", "").strip()
    return int(raw) if raw.isdigit() else 0


def _mix(base: int, rank: int) -> int:
    digest = hashlib.blake2b(f"{base}:{rank}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


def worker_init_fn(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: a distinct, reproducible seed for every worker of every rank.

    Inside a worker, ``torch.initial_seed()`` is the loader's base seed plus ``worker_id``: it
    already differs between workers, and it is reproducible when the main process was seeded; but
    ranks seeded alike have equal base seeds, so worker ``i`` of every rank would draw the same
    augmentations. This mixes the global rank (``torch.distributed``, else ``RANK``) in: on rank 0
    the seed is ``torch.initial_seed()`` unchanged (PyTorch's own choice), on rank ``r > 0`` a
    64-bit hash of ``(initial_seed, r)``. torch, ``random`` and NumPy (``seed % 2**32``) are all
    reseeded with it. Must be a module-level function (picklable) for spawn/forkserver workers.

    Example::

        DataLoader(train_set, batch_size=64, num_workers=4, worker_init_fn=worker_init_fn)
    """
    base = torch.initial_seed()
    rank = _global_rank()
    _seed_all(base if rank == 0 else _mix(base, rank))
