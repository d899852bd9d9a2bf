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
from collections.abc import Iterator, Sized
from typing import Any, cast

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

    def __init__(
        self,
        data_source: Sized | int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        self.num_samples_total = data_source if isinstance(data_source, int) else len(data_source)
        self.shuffle = shuffle
        self.seed = int(seed)
        world, this_rank = _distributed()
        self.num_replicas = world if num_replicas is None else num_replicas
        self.rank = this_rank if rank is None else rank
        self.epoch = 0
        self._skip = 0

    def __len__(self) -> int:
        return (self.num_samples_total + self.num_replicas - 1) // self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def skip(self, samples: int) -> None:
        """Start the next pass ``samples`` into this rank's share (same world size)."""
        self._skip = max(0, int(samples)) * self.num_replicas

    def skip_global(self, positions: int) -> None:
        """Start the next pass after the first ``positions`` entries of the epoch's global order.

        This is what makes a position portable across world sizes: N ranks that each consumed
        ``s`` samples consumed global positions ``0 .. s*N-1``; on M ranks the rest of the order
        is dealt out again, so every sample the interrupted epoch had not seen is seen once.
        """
        self._skip = max(0, int(positions))

    def global_order(self, epoch: int | None = None) -> list[int]:
        """The epoch's order over all samples, before it is dealt out to the ranks."""
        epoch = self.epoch if epoch is None else epoch
        n = self.num_samples_total
        if self.shuffle:
            gen = torch.Generator().manual_seed(epoch_seed(self.seed, epoch))
            return torch.randperm(n, generator=gen).tolist()
        return list(range(n))

    def order(self, epoch: int | None = None, skip_global: int = 0) -> list[int]:
        """This rank's indices for ``epoch`` (default: the current one).

        ``skip_global`` drops the first positions of the global order; the rest is padded (with
        the epoch's first indices, like ``DistributedSampler``) to a multiple of the world size
        and dealt out round-robin. With the same world size this equals skipping ``skip_global /
        world`` samples of this rank's share.
        """
        indices = self.global_order(epoch)
        n = len(indices)
        rest = indices[min(skip_global, n) :]
        if self.num_replicas > 1:
            total = -(-len(rest) // self.num_replicas) * self.num_replicas
            pad = total - len(rest)
            if pad and indices:
                rest += (indices * (pad // n + 1))[:pad]
            rest = rest[self.rank : total : self.num_replicas]
        return rest

    def __iter__(self) -> Iterator[int]:
        start, self._skip = self._skip, 0
        return iter(self.order(skip_global=start))

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": "ResumableSampler",
            "epoch": self.epoch,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "num_samples": self.num_samples_total,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch = int(state["epoch"])
        self.seed = int(state["seed"])
        self.shuffle = bool(state["shuffle"])


class ResumableLoader(DataLoader[Any]):
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

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool = False,
        *,
        seed: int = 0,
        drop_last: bool = False,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("batch_sampler") is not None or kwargs.get("sampler") is not None:
            raise ValueError("ResumableLoader builds its own sampler; pass shuffle= and seed=")
        if batch_size is None:
            raise ValueError("ResumableLoader needs a batch_size")
        self._owns_generator = kwargs.get("generator") is None
        if self._owns_generator:
            kwargs["generator"] = torch.Generator()
        sampler = ResumableSampler(dataset, shuffle=shuffle, seed=seed)
        super().__init__(dataset, batch_size=batch_size, shuffle=False, sampler=sampler, drop_last=drop_last, **kwargs)
        self.seed = int(seed)
        self.epoch = 0
        self.batches_done = 0
        #: Global positions of the epoch consumed before a resume on a different world size.
        self.resumed_global = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch of the next pass; the saved position is kept if it is the same one."""
        if int(epoch) != self.epoch:
            self.epoch = int(epoch)
            self.batches_done = 0
            self.resumed_global = 0

    @property
    def _own_sampler(self) -> ResumableSampler:
        """The sampler ``__init__`` built (``DataLoader`` types it as any ``Sampler``)."""
        return cast(ResumableSampler, self.sampler)

    @property
    def _batch(self) -> int:
        """``batch_size`` as an int (``__init__`` refused None)."""
        return int(cast(int, self.batch_size))

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # yields batches: not torch's _BaseDataLoaderIter
        sampler = self._own_sampler
        sampler.set_epoch(self.epoch)
        sampler.skip_global(self.global_samples_done)
        if self._owns_generator:
            self.generator.manual_seed(epoch_seed(self.seed, self.epoch, salt=1))
        for batch in super().__iter__():
            self.batches_done += 1
            yield batch
        self.epoch += 1
        self.batches_done = 0
        self.resumed_global = 0

    @property
    def global_samples_done(self) -> int:
        """Positions of this epoch's global order consumed by all ranks together."""
        world = int(self._own_sampler.num_replicas)
        return self.resumed_global + self.batches_done * self._batch * world

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": "ResumableLoader",
            "epoch": self.epoch,
            "batches_done": self.batches_done,
            "samples_done": self.batches_done * self._batch,
            "world_size": int(self._own_sampler.num_replicas),
            "global_samples_done": self.global_samples_done,
            "seed": self.seed,
            "batch_size": self._batch,
            "shuffle": bool(self._own_sampler.shuffle),
            "num_samples": int(self._own_sampler.num_samples_total),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state.get("seed", self.seed)) != self.seed:
            warnings.warn(
                f"ResumableLoader: checkpoint seed {state['seed']} differs from {self.seed}; using the checkpoint's",
                stacklevel=2,
            )
            self.seed = int(state["seed"])
        self._own_sampler.seed = self.seed
        world = int(self._own_sampler.num_replicas)
        saved_world = int(state.get("world_size", world))
        if saved_world != world:
            self._load_resharded(state, saved_world)
            return
        self.resumed_global = 0
        samples = int(state.get("samples_done", 0))
        batch = self._batch
        if samples % batch:
            warnings.warn("ResumableLoader: batch size changed; resuming at the nearest batch", stacklevel=2)
        self.epoch = int(state["epoch"])
        self.batches_done = samples // batch
        if self.batches_done >= len(self):
            # Saved after the last batch of an epoch: the next pass is the next epoch.
            self.epoch += 1
            self.batches_done = 0

    def _load_resharded(self, state: dict[str, Any], saved_world: int) -> None:
        """A position saved by ``saved_world`` ranks, continued on this run's world size.

        The consumed prefix of the epoch's global order is the same for every world size, so
        the rest is dealt out to the new ranks: each sample the interrupted epoch had not seen is
        seen once (the padding that makes shares equal may repeat a few, as
        ``DistributedSampler`` does).
        """
        batch = self._batch
        consumed = int(state.get("global_samples_done", int(state.get("samples_done", 0)) * saved_world))
        if int(state.get("batch_size", batch)) != batch:
            warnings.warn("ResumableLoader: batch size changed; the global position is kept", stacklevel=3)
        self.epoch = int(state["epoch"])
        self.batches_done = 0
        self.resumed_global = consumed
        if consumed >= int(self._own_sampler.num_samples_total):
            self.epoch += 1
            self.resumed_global = 0
