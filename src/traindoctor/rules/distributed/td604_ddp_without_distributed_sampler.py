"""TD604 ddp-without-distributed-sampler: every DDP rank trains on the same samples."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.runtime.events import Monitor
from traindoctor.static.args import MISSING

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.records import LoaderInfo
    from traindoctor.static.context import FileContext

DDP = ("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel")
#: Words of a file that splits its data per rank some other way (or lets a framework do it).
SPLITS = (
    "sampler",
    "Sampler",
    "shard",
    "split_by",
    "num_replicas",
    "IterableDataset",
    "accelerate",
    "lightning",
    "Fabric",
    "get_rank",
    "wds.",
    "webdataset",
)


class DdpWithoutDistributedSampler(Rule):
    code = "TD604"
    name = "ddp-without-distributed-sampler"
    severity = Severity.ERROR
    summary = (
        "DDP training whose loader has no `DistributedSampler`: every rank trains on the same samples; "
        "pass `sampler=DistributedSampler(dataset)`."
    )
    static = True
    runtime = True
    triggers = ("DistributedDataParallel",)
    fixable = "never"

    what_it_does = """
    Reports a training DataLoader built without a `sampler` (or `batch_sampler`) in a file that
    wraps its model in `DistributedDataParallel`, when nothing in the file splits the data per
    rank another way: no sampler of any kind, no sharding (`shard`, `split_by_node`,
    `num_replicas`, an `IterableDataset`, WebDataset), no rank read (`get_rank`), and no
    accelerate or Lightning (which insert the distributed sampler themselves). Test files are
    skipped.

    At run time each rank hashes the contents of the first batches of every loader and puts the
    digest in the process group's store; the rule reports when the digests of a training loader
    are identical on every rank.
    """
    why_bad = """
    DDP averages the gradients of the ranks, which only helps when each rank computed them on
    different samples. A plain DataLoader on every rank iterates over the whole dataset in the
    same order (the same seed), so all ranks process identical batches: `world_size` GPUs do the
    work of one, an epoch is `world_size` times longer than needed, and the effective batch the
    learning rate was scaled for is not what the model sees. `DistributedSampler` gives each rank
    its own `1 / world_size` share of the dataset.
    """
    example = """
    model = DistributedDataParallel(model, device_ids=[rank])
    loader = DataLoader(dataset, batch_size=32, shuffle=True)
    """
    use_instead = """
    model = DistributedDataParallel(model, device_ids=[rank])
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler)
    # and sampler.set_epoch(epoch) at the start of every epoch
    """
    references = (
        "https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler",
        "https://pytorch.org/tutorials/intermediate/ddp_tutorial.html",
    )

    valid = (
        Valid("""
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader, DistributedSampler

        model = DDP(net)
        loader = DataLoader(ds, batch_size=32, sampler=DistributedSampler(ds))
        for x, y in loader:
            criterion(model(x), y).backward()
        """),
        Valid("""
        import torch
        from torch.utils.data import DataLoader

        # single process: nothing to split
        loader = DataLoader(ds, batch_size=32, shuffle=True)
        for x, y in loader:
            criterion(model(x), y).backward()
        """),
        Valid("""
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader

        # an iterable dataset that shards itself by rank
        model = DDP(net)
        loader = DataLoader(ShardedStream(rank=dist.get_rank()), batch_size=32)
        for x, y in loader:
            criterion(model(x), y).backward()
        """),
    )
    invalid = (
        Invalid("""
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DataLoader

        def main(rank):
            model = DDP(net.to(rank), device_ids=[rank])
            loader = DataLoader(ds, batch_size=32, shuffle=True)  # TD604
            for x, y in loader:
                criterion(model(x), y).backward()
        """),
        Invalid("""
        import torch
        from torch.utils.data import DataLoader

        model = torch.nn.parallel.DistributedDataParallel(net)
        train_loader = DataLoader(train_ds, batch_size=64, num_workers=4)  # TD604
        for epoch in range(10):
            for x, y in train_loader:
                loss_fn(model(x), y).backward()
        """),
        Invalid("""
        from torch import nn
        from torch.utils import data

        def run():
            ddp = nn.parallel.DistributedDataParallel(build())
            for batch in data.DataLoader(ds, 16, True):  # TD604
                ddp(batch).mean().backward()
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import iter_training_loaders

        if not ctx.calls_to(*DDP) or any(word in ctx.source for word in SPLITS):
            return
        for loader in iter_training_loaders(ctx):
            if loader.factory is not None:
                continue  # built in another module: its sampler is not seen here
            if ctx.arg(loader.call, "sampler") is not MISSING or ctx.arg(loader.call, "batch_sampler") is not MISSING:
                continue
            yield ctx.report(
                self,
                loader.call,
                "This training loader has no `DistributedSampler` while the model is wrapped in DDP: "
                "every rank trains on the same samples; pass `sampler=DistributedSampler(dataset)`.",
                help="Give the loader a `DistributedSampler`",
            )


# ---------------------------------------------------------------- runtime half
#: Batches hashed per loader; bytes read per tensor.
HASHED_BATCHES = 3
BYTES_PER_TENSOR = 1 << 16
_KEY = "traindoctor/td604"
#: Watches started in this process: the store's keys of one watch are not another's (every rank
#: runs the same script, so the n-th watch of each rank shares its number).
_RUNS = [0]


def _digest(batch: Any, h: Any, depth: int = 0) -> None:
    """Feed the tensors of a (nested) batch to the hash ``h`` (the first bytes of each)."""
    if depth > 4:
        return
    if hasattr(batch, "detach") and hasattr(batch, "numel"):
        t = batch.detach()
        if t.device.type != "cpu":
            return  # copying device batches back to the host would synchronise
        flat = t.reshape(-1)
        part = flat[: max(BYTES_PER_TENSOR // max(flat.element_size(), 1), 1)]
        h.update(str(tuple(t.shape)).encode())
        try:
            data = part.contiguous().numpy().tobytes()
        except Exception:  # a dtype numpy lacks (bfloat16)
            data = part.float().contiguous().numpy().tobytes()
        h.update(data)
        return
    if isinstance(batch, dict):
        for key in sorted(batch, key=str)[:16]:
            _digest(batch[key], h, depth + 1)
    elif isinstance(batch, (list, tuple)):
        for item in list(batch)[:16]:
            _digest(item, h, depth + 1)


class DdpWithoutDistributedSamplerMonitor(Monitor):
    """The first batches of each loader, hashed per rank and compared through the process
    group's key-value store (set once, read without waiting: a rank that is late or gone only
    leaves the comparison undecided)."""

    rule = DdpWithoutDistributedSampler

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self._hashes: dict[int, Any] = {}
        self._batches: dict[int, int] = {}
        self._published: set[int] = set()
        self._verdicts: dict[int, bool] = {}
        self._observing = False
        self._run = 0

    def on_run_start(self) -> None:
        _RUNS[0] += 1
        self._run = _RUNS[0]
        add = getattr(self.session, "add_batch_observer", None)
        if add is not None and self.session.world_size > 1:
            add(self._observe)
            self._observing = True

    def _observe(self, info: LoaderInfo, batch: Any) -> None:
        key = id(info)
        seen = self._batches.get(key, 0)
        if seen >= HASHED_BATCHES:
            return
        h = self._hashes.get(key)
        if h is None:
            h = self._hashes[key] = hashlib.blake2b(digest_size=16)
        _digest(batch, h)
        self._batches[key] = seen + 1

    def on_step_end(self, step_record: Any) -> None:
        if not self._observing or step_record.index > 64:
            return
        store = _store()
        if store is None:
            return
        world, rank = self.session.world_size, self.session.rank
        for index, info in enumerate(self.session.loaders):
            key = id(info)
            if self._batches.get(key, 0) < HASHED_BATCHES or index in self._verdicts:
                continue
            name = f"{_KEY}/{self._run}/{index}"
            if index not in self._published:
                store.set(f"{name}/{rank}", self._hashes[key].hexdigest())
                self._published.add(index)
            keys = [f"{name}/{r}" for r in range(world)]
            if store.check(keys):
                digests = {store.get(k) for k in keys}
                self._verdicts[index] = len(digests) == 1

    def on_run_end(self) -> None:
        training = {id(info) for info in self.session.training_loaders()}
        loaders = list(self.session.loaders)
        for index, same in sorted(self._verdicts.items()):
            if not same or index >= len(loaders) or id(loaders[index]) not in training:
                continue
            self.report(
                f"The first {HASHED_BATCHES} batches of this training loader were identical on all "
                f"{self.session.world_size} ranks: every rank trains on the same samples; give the "
                "loader a `DistributedSampler`.",
                evidence={
                    "identical_batches": HASHED_BATCHES,
                    "world_size": self.session.world_size,
                    "loader_index": index,
                },
                step=self.session.step,
            )


def _store() -> Any:
    """The default process group's store, or None (not initialised, or gone)."""
    try:
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            return None
        from torch.distributed import distributed_c10d

        return distributed_c10d._get_default_store()
    except Exception:
        return None
