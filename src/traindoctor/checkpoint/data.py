"""A data position that survives a restart: :class:`ResumableSampler` and :class:`ResumableLoader`.

Why: a checkpoint taken in the middle of an epoch must let the resumed run continue with the
batches the interrupted epoch had not yet seen, in the same order. ``RandomSampler`` draws a
fresh seed from the global generator each epoch and a ``DataLoader`` draws its workers' base seed
from it too, so neither the order nor the position can be rebuilt. Here the order of epoch ``e``
is a pure function of ``(seed, e)``, the worker base seed as well, and the loader counts the
batches it has handed out, so ``state_dict()`` is three integers and resuming skips the consumed
samples at the index level (no data is loaded and thrown away).

This module imports torch; :mod:`traindoctor.checkpoint` exposes it lazily.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterator, Sized

import torch
from torch.utils.data import DataLoader, Sampler

_SEED_MIX = 0x9E3779B97F4A7C15  # odd constant: distinct, well-spread seeds per epoch


def epoch_seed(seed: int, epoch: int, salt: int = 0) -> int:
    """A 63-bit seed derived from ``(seed, epoch, salt)``; same inputs, same seed, any process."""
    value = (int(seed) * 1_000_003 + int(epoch) * _SEED_MIX + int(salt) * 7919) & (2**64 - 1)
    value ^= value >> 31
    value = (value * 0xBF58476D1CE4E5B9) & (2**64 - 1)
    return (value ^ (value >> 29)) & (2**63 - 1)


def _distributed() -> tuple[int, int]:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_world_size(), torch.distributed.get_rank()
    return 1, 0


class ResumableSampler(Sampler[int]):
    """Index sampler whose order depends only on ``(seed, epoch)`` and that can skip ahead.

    Under ``torch.distributed`` it shards like ``DistributedSampler`` (padding to equal shares).
    ``skip(n)`` makes the *next* iteration start ``n`` samples into this rank's share.
    """

    def __init__(self, data_source: Sized | int, *, shuffle: bool = True, seed: int = 0,
                 num_replicas: int | None = None, rank: int | None = None) -> None:
        self.num_samples_total = data_source if isinstance(data_source, int) else len(data_source)
        self.shuffle = shuffle
        self.seed = int(seed)
        world, this_rank = _distributed()
        self.num_replicas = world if num_replicas is None else num_replicas
        self.rank = this_rank if rank is None else rank
        self.epoch = 0
        self._skip = 0

    def __len__(self) -> int:
        return -(-self.num_samples_total // self.num_replicas)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def skip(self, samples: int) -> None:
        self._skip = max(0, int(samples))

    def order(self, epoch: int | None = None) -> list[int]:
        """This rank's indices for ``epoch`` (default: the current one), without skipping."""
        epoch = self.epoch if epoch is None else epoch
        n = self.num_samples_total
        if self.shuffle:
            gen = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
            indices = torch.randperm(n, generator=gen).tolist()
        else:
            indices = list(range(n))
        if self.num_replicas > 1:
            total = len(self) * self.num_replicas
            indices += indices[: total - n] if total - n <= n else (indices * total)[: total - n]
            indices = indices[self.rank:total:self.num_replicas]
        return indices

    def __iter__(self) -> Iterator[int]:
        indices = self.order()
        start, self._skip = self._skip, 0
        return iter(indices[start:])

    def state_dict(self) -> dict[str, Any]:
        return {"kind": "ResumableSampler", "epoch": self.epoch, "seed": self.seed,
                "shuffle": self.shuffle, "num_samples": self.num_samples_total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.seed = int(state["seed"])
        self.shuffle = bool(state["shuffle"])


class ResumableLoader(DataLoader):
    """A ``DataLoader`` that knows how far into the epoch it is, and resumes there exactly.

    Use it like a DataLoader (``shuffle``, ``num_workers``, ``persistent_workers`` ...) plus
    ``seed``. Each ``for batch in loader`` pass is one epoch; the epoch advances by itself when a
    pass completes (or call ``set_epoch``). Save it with ``checkpoint.save(..., loader=loader)``;
    after ``checkpoint.load(..., loader=loader)`` the next pass yields exactly the batches the
    interrupted epoch had not delivered. Worker processes get a base seed derived from
    ``(seed, epoch)``, so creating the loader's iterator never draws from the global generator.

    Limitation: a Dataset that draws random numbers inside workers (augmentation) gets the same
    per-worker seeds, but after a mid-epoch resume batches are assigned to workers from the start
    of the round-robin, so such augmentation is not bit-exact; seed per sample for that.
    """

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool = False, *,
                 seed: int = 0, drop_last: bool = False, **kwargs: Any) -> None:
        if kwargs.get("batch_sampler") is not None or kwargs.get("sampler") is not None:
            raise ValueError("ResumableLoader builds its own sampler; pass shuffle= and seed=")
        if batch_size is None:
            raise ValueError("ResumableLoader needs a batch_size")
        self._owns_generator = kwargs.get("generator") is None
        if self._owns_generator:
            kwargs["generator"] = torch.Generator()
        sampler = ResumableSampler(dataset, shuffle=shuffle, seed=seed)
        super().__init__(dataset, batch_size=batch_size, shuffle=False, sampler=sampler,
                         drop_last=drop_last, **kwargs)
        self.seed = int(seed)
        self.epoch = 0
        self.batches_done = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next pass; the saved position is kept if it is the same one."""
        if int(epoch) != self.epoch:
            self.epoch = int(epoch)
            self.batches_done = 0

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        sampler: ResumableSampler = self.sampler  # type: ignore[assignment]
        sampler.set_epoch(self.epoch)
        sampler.skip(self.batches_done * int(self.batch_size))  # type: ignore[arg-type]
        if self._owns_generator:
            self.generator.manual_seed(epoch_seed(self.seed, self.epoch, salt=1))
        for batch in super().__iter__():
            self.batches_done += 1
            yield batch
        self.epoch += 1
        self.batches_done = 0

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": "ResumableLoader", "epoch": self.epoch, "batches_done": self.batches_done,
            "samples_done": self.batches_done * int(self.batch_size),  # type: ignore[arg-type]
            "seed": self.seed, "batch_size": int(self.batch_size),  # type: ignore[arg-type]
            "shuffle": bool(self.sampler.shuffle),  # type: ignore[attr-defined]
            "num_samples": int(self.sampler.num_samples_total),  # type: ignore[attr-defined]
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state.get("seed", self.seed)) != self.seed:
            warnings.warn(f"ResumableLoader: checkpoint seed {state['seed']} differs from "
                          f"{self.seed}; using the checkpoint's", stacklevel=2)
            self.seed = int(state["seed"])
        self.sampler.seed = self.seed  # type: ignore[attr-defined]
        samples = int(state.get("samples_done", 0))
        batch = int(self.batch_size)  # type: ignore[arg-type]
        if samples % batch:
            warnings.warn("ResumableLoader: batch size changed; resuming at the nearest batch",
                          stacklevel=2)
        self.epoch = int(state["epoch"])
        self.batches_done = samples // batch
        if self.batches_done >= len(self):
            # Saved after the last batch of an epoch: the next pass is the next epoch.
            self.epoch += 1
            self.batches_done = 0
