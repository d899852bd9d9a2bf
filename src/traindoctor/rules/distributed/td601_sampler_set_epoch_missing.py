"""TD601 sampler-set-epoch-missing: a DistributedSampler replays the same order every epoch."""

from __future__ import annotations

import ast
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.args import UNKNOWN
from traindoctor.static.names import receiver

if TYPE_CHECKING:  # pragma: no cover
    from torch.utils.data import DistributedSampler

    from traindoctor.facts.data.static import Loader, LoaderIndex
    from traindoctor.runtime.live import Site
    from traindoctor.static.context import FileContext


class SamplerSetEpochMissing(Rule):
    code = "TD601"
    name = "sampler-set-epoch-missing"
    severity = Severity.ERROR
    summary = (
        "A `DistributedSampler` is iterated over several epochs without `sampler.set_epoch(epoch)`, "
        "so every epoch sees the same order; call `set_epoch(epoch)` before each epoch."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("DistributedSampler",)
    project_aware = True
    fixable = "never"

    what_it_does = """
    Reports a shuffling `DistributedSampler` whose `DataLoader` is iterated more than once (inside
    an epoch loop, directly or through a function called in the loop) when the file never calls
    `set_epoch` on it: not as `sampler.set_epoch(epoch)`, not as `loader.sampler.set_epoch(epoch)`.
    The finding is placed at the sampler's construction. Samplers with `shuffle=False` (the order
    does not depend on the epoch), samplers of evaluation loaders, and files that call `set_epoch`
    on something the checker cannot tell apart from the sampler are not reported.

    When a project helper in another module builds the sampler and its loader and returns the
    loader (alone, in a tuple or a dict, `loader, sampler = init_data(...)`, or through another
    helper it returns the value of), or the script builds the loader from a sampler a helper
    returns (`sampler = create_sampler(ds, cfg)`), the finding is placed at the helper's call (or
    the loader) in the training script, citing the sampler's construction; it needs a script
    with no `set_epoch` call on something that may be a sampler and no project function it
    calls that makes one (`shuffle_dataset(loader, epoch)`). A `set_epoch` on an object reached
    through a `.dataset` attribute (`loader.dataset.set_epoch(epoch)`, a prefetcher the dataset
    owns) sets the dataset's epoch, not the sampler's, and does not count.

    Frameworks that set the epoch themselves are left alone: a loader returned by a Lightning
    module's `train_dataloader()` (the fit loop sets it every epoch), and a loader handed to
    `accelerator.prepare(...)` or `fabric.setup_dataloaders(...)` (their wrappers set it on
    every pass).
    """
    why_bad = """
    `DistributedSampler` shuffles with a generator seeded by `seed + epoch`, and the epoch only
    changes when `set_epoch()` is called. Without it, every epoch uses the permutation of epoch 0:
    each rank sees the same samples in the same order every epoch. Training loses the
    reshuffling SGD relies on, which typically costs accuracy, and no error or warning appears.
    """
    example = """
    sampler = DistributedSampler(train_ds)
    loader = DataLoader(train_ds, batch_size=64, sampler=sampler)
    for epoch in range(epochs):
        for x, y in loader:
            ...
    """
    use_instead = """
    sampler = DistributedSampler(train_ds)
    loader = DataLoader(train_ds, batch_size=64, sampler=sampler)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            ...
    """
    options = """
    No thresholds. At run time: a shuffling `DistributedSampler` iterated at least twice, always
    with the same `epoch`.
    """
    references = (
        "https://pytorch.org/docs/stable/data.html#torch.utils.data.distributed.DistributedSampler",
        "https://pytorch.org/tutorials/intermediate/ddp_series_multigpu.html",
    )

    valid = (
        Valid(
            """
            from torch.utils.data import DataLoader, DistributedSampler

            sampler = DistributedSampler(train_ds)
            loader = DataLoader(train_ds, batch_size=64, sampler=sampler)
            for epoch in range(10):
                sampler.set_epoch(epoch)
                for x, y in loader:
                    model(x).sum().backward()
            """
        ),
        # set_epoch through the loader, and inside the called function.
        Valid(
            """
            import torch

            def train_one_epoch(loader, epoch):
                loader.sampler.set_epoch(epoch)
                for x, y in loader:
                    model(x).sum().backward()

            train_loader = torch.utils.data.DataLoader(
                ds, batch_size=32, sampler=torch.utils.data.distributed.DistributedSampler(ds)
            )
            for epoch in range(5):
                train_one_epoch(train_loader, epoch)
            """
        ),
        # No shuffling, a single pass, and an evaluation loader.
        Valid(
            """
            from torch.utils.data import DataLoader
            from torch.utils.data.distributed import DistributedSampler

            s1 = DistributedSampler(train_ds, shuffle=False)
            a = DataLoader(train_ds, sampler=s1)
            s2 = DistributedSampler(train_ds)
            b = DataLoader(train_ds, sampler=s2)
            s3 = DistributedSampler(val_ds)
            val_loader = DataLoader(val_ds, sampler=s3)
            for epoch in range(10):
                for x, y in a:
                    pass
                for x, y in val_loader:
                    pass
            for x, y in b:
                pass
            """
        ),
        Valid("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, DistributedSampler

        accelerator = Accelerator()
        sampler = DistributedSampler(train_set, shuffle=True)
        loader = DataLoader(train_set, batch_size=64, sampler=sampler)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for epoch in range(10):
            for x, y in loader:  # the prepared loader calls sampler.set_epoch itself
                accelerator.backward(model(x).sum())
                optimizer.step()
        """),
        Valid("""
        import lightning as L
        from torch.utils.data import DataLoader, DistributedSampler

        class Model(L.LightningModule):
            def training_step(self, batch, batch_idx):
                return self(batch).sum()

            def train_dataloader(self):
                sampler = DistributedSampler(self.train_set, shuffle=True)
                return DataLoader(self.train_set, batch_size=64, sampler=sampler)

        L.Trainer(devices=2, strategy="ddp", use_distributed_sampler=False, max_epochs=10).fit(Model())
        """),
    )
    invalid = (
        Invalid(
            """
            from torch.utils.data import DataLoader, DistributedSampler

            sampler = DistributedSampler(train_ds)  # TD601
            loader = DataLoader(train_ds, batch_size=64, sampler=sampler)
            for epoch in range(10):
                for x, y in loader:
                    model(x).sum().backward()
            """
        ),
        # torchvision-reference shape: if/else binding, alias import, loop in a called function.
        Invalid(
            """
            import torch.utils.data as tud

            def train_one_epoch(model, loader):
                for x, y in loader:
                    model(x).sum().backward()

            def main(args):
                if args.distributed:
                    train_sampler = tud.distributed.DistributedSampler(dataset)  # TD601
                else:
                    train_sampler = tud.RandomSampler(dataset)
                data_loader = tud.DataLoader(dataset, batch_size=args.batch_size, sampler=train_sampler)
                for epoch in range(args.epochs):
                    train_one_epoch(model, data_loader)
            """
        ),
        # A BatchSampler bound to a name; only the dataset's own epoch is set.
        Invalid(
            """
            from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

            sampler = DistributedSampler(train_ds)  # TD601
            batches = BatchSampler(sampler, 64, drop_last=True)
            loader = DataLoader(train_ds, batch_sampler=batches, num_workers=4)
            for epoch in range(10):
                loader.dataset.set_epoch(epoch)
                for x, y in loader:
                    model(x).sum().backward()
            """
        ),
        # Inline sampler with a conditional expression, in a class, positional shuffle=True.
        Invalid(
            """
            from torch.utils.data import DataLoader
            from torch.utils.data.distributed import DistributedSampler as DS

            class Trainer:
                def setup(self):
                    self.loader = DataLoader(
                        self.ds,
                        batch_size=8,
                        sampler=DS(self.ds, None, None, True) if self.ddp else None,  # TD601
                    )

                def fit(self):
                    while self.epoch < self.epochs:
                        for batch in self.loader:
                            self.step(batch)
                        self.epoch += 1
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import DISTRIBUTED_SAMPLER, loader_index
        from traindoctor.facts.frameworks.static import framework_sets_epoch

        if any(c.value == "set_epoch" for c in ctx.of(ast.Constant)):
            return  # getattr(x, "set_epoch") / hasattr checks: the call is there, just indirect
        yield from self._helper_samplers(ctx)
        samplers = ctx.calls_to(DISTRIBUTED_SAMPLER)
        if not samplers:
            return
        index = loader_index(ctx)
        refs = {id(s): _ref_ids(index, s) for s in samplers}
        users = {id(s): [l for l in index.loaders if _uses_sampler(ctx, l, refs[id(s)])] for s in samplers}
        for sampler in samplers:
            shuffle = ctx.arg_value(sampler, "shuffle", default=True)
            if shuffle is UNKNOWN or not shuffle:
                continue
            loaders = [l for l in users[id(sampler)] if not l.evaluation_only]
            repeated = [l for l in loaders if l.repeated_site is not None]
            if not repeated or any(framework_sets_epoch(ctx, l) for l in loaders):
                continue
            if _set_epoch_may_reach(ctx, sampler, samplers, refs, users):
                continue
            site = repeated[0].repeated_site
            loop = site.repeated_by if site is not None else None
            where = f" (loop at line {loop.lineno})" if isinstance(loop, ast.stmt) else ""
            yield ctx.report(
                self,
                sampler,
                f"This DistributedSampler's loader is iterated every epoch{where} but `set_epoch()` "
                "is never called, so every epoch replays the same order; call "
                "`sampler.set_epoch(epoch)` at the start of each epoch.",
                help="Call `sampler.set_epoch(epoch)` at the start of each epoch",
            )

    def _helper_samplers(self, ctx: FileContext) -> Iterable[Finding]:
        """A project helper builds the DistributedSampler and its loader (``loader, sampler =
        init_data(...)``); this file iterates the loader every epoch and nothing sets the epoch:
        no ``set_epoch`` call here, none in a project function the file calls."""
        from traindoctor.facts.data.epochs import sets_sampler_epoch
        from traindoctor.facts.data.project import function_data
        from traindoctor.facts.data.static import iter_training_loaders
        from traindoctor.facts.data.summariser import distributed_sampler
        from traindoctor.facts.frameworks.static import framework_sets_epoch

        view = ctx.project
        if view is None or not view.imports_project:
            return
        if any(sets_sampler_epoch(ctx, c) for c in ctx.method_calls("set_epoch")):
            return
        found = []
        for loader in iter_training_loaders(ctx):
            if loader.repeated_site is None:
                continue
            if loader.factory is not None:
                data = function_data(loader.factory.function)
                facts = loader.facts or (data.loader if data is not None else None)
                place = facts.distributed_sampler if facts is not None else None
            else:  # built here from a sampler a helper of another module returns
                place = distributed_sampler(ctx, loader.call)
                if place is not None and place.path == ctx.filename:
                    continue  # built in this file: the check above judges it
            if place is not None and not framework_sets_epoch(ctx, loader):
                found.append((loader, place))
        if not found:
            return
        for _, resolved in view.calls():
            data = function_data(resolved.function)
            if data is not None and data.sets_epoch:
                return  # ``shuffle_dataset(loader, epoch)``: a helper sets it
        for loader, place in found:
            site = loader.repeated_site
            loop = site.repeated_by if site is not None else None
            where = f" (loop at line {loop.lineno})" if isinstance(loop, ast.stmt) else ""
            if loader.factory is not None:
                name = loader.factory.name
                subject, note = f"This training loader from `{name}`", f" (for `{name}`)"
            else:
                subject, note = "This training loader", ""
            yield ctx.report(
                self,
                loader.call,
                f"{subject} draws from a DistributedSampler and is iterated every epoch{where}, but "
                "`set_epoch()` is never called, so every epoch replays the same order; call "
                "`sampler.set_epoch(epoch)` at the start of each epoch.",
                help="Call `sampler.set_epoch(epoch)` at the start of each epoch",
                related=view.related(place, f"the DistributedSampler is built here{note}"),
            )


def _ref_ids(index: LoaderIndex, sampler: ast.Call) -> set[int]:
    return {id(sampler)} | {id(r) for use in index.trace(sampler) for r in use.refs}


def _uses_sampler(ctx: FileContext, loader: Loader, refs: set[int]) -> bool:
    """Whether the loader draws its indices from the sampler (``sampler=`` or a BatchSampler)."""
    arg = ctx.arg(loader.call, "sampler")
    if isinstance(arg, ast.AST) and _is_ref(arg, refs):
        return True
    given = ctx.arg(loader.call, "batch_sampler")
    # ``batches = BatchSampler(sampler, 32, ...)`` bound to a name, or spelled in the call
    batch = ctx.binding(given) if isinstance(given, ast.Name) else given
    if isinstance(batch, ast.Call) and batch.args and _is_ref(batch.args[0], refs):
        return True
    return False


def _is_ref(node: ast.AST, refs: set[int]) -> bool:
    if id(node) in refs:
        return True
    if isinstance(node, ast.IfExp):
        return id(node.body) in refs or id(node.orelse) in refs
    return False


def _set_epoch_may_reach(
    ctx: FileContext,
    sampler: ast.Call,
    samplers: list[ast.Call],
    refs: dict[int, set[int]],
    users: dict[int, list[Loader]],
) -> bool:
    """Whether some ``set_epoch`` call in the file may act on ``sampler``.

    Only a call whose receiver is clearly another sampler (or another loader's ``.sampler``, or
    an object a dataset holds) is ruled out; anything the checker cannot attribute counts as reaching it (precision first).
    """
    own_loader_refs = {id(r) for l in users[id(sampler)] for r in l.refs}
    other_refs = set().union(*(refs[id(s)] for s in samplers if s is not sampler))
    other_loader_refs = {
        id(r) for s in samplers if s is not sampler for l in users[id(s)] for r in l.refs
    } - own_loader_refs
    from traindoctor.facts.data.epochs import sets_sampler_epoch

    for call in ctx.method_calls("set_epoch"):
        if not sets_sampler_epoch(ctx, call):
            continue  # ``loader.dataset.set_epoch(epoch)``: the dataset's epoch, not the sampler's
        target = receiver(call)
        if id(target) in refs[id(sampler)]:
            return True
        if isinstance(target, ast.Attribute) and target.attr in ("sampler", "batch_sampler"):
            if id(target.value) in own_loader_refs:
                return True
            if id(target.value) in other_loader_refs:
                continue
        if id(target) in other_refs:
            continue
        return True
    return False


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class _SamplerState:
    """What the monitor saw of one sampler: where it was built, the epoch of each iteration."""

    __slots__ = ("epochs", "ref", "replicas", "set_epoch", "shuffle", "site")

    def __init__(self, sampler: DistributedSampler[Any], site: Site | None) -> None:
        self.ref = weakref.ref(sampler)
        self.site = site
        #: ``sampler.epoch`` at each iteration.
        self.epochs: list[int | None] = []
        #: ``set_epoch`` calls.
        self.set_epoch = 0
        self.shuffle = True
        self.replicas: int | None = getattr(sampler, "num_replicas", None)


class SamplerSetEpochMissingMonitor(Monitor):
    """A shuffling ``DistributedSampler`` iterated for several epochs with the same epoch value,
    so every epoch sees the same order. Reported at the sampler's construction."""

    rule = SamplerSetEpochMissing

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self.samplers: dict[int, _SamplerState] = {}
        self.order: list[_SamplerState] = []

    def _state(self, sampler: DistributedSampler[Any], site: Site | None = None) -> _SamplerState:
        state = self.samplers.get(id(sampler))
        if state is None or state.ref() is not sampler:
            state = _SamplerState(sampler, site)
            self.samplers[id(sampler)] = state
            self.order.append(state)
        return state

    def on_sampler_created(self, sampler: DistributedSampler[Any], site: Site | None = None) -> None:
        self._state(sampler, site)

    def on_sampler_set_epoch(self, sampler: DistributedSampler[Any], epoch: int) -> None:
        self._state(sampler).set_epoch += 1

    def on_sampler_iter(self, sampler: DistributedSampler[Any]) -> None:
        state = self._state(sampler)
        state.epochs.append(getattr(sampler, "epoch", None))
        state.shuffle = bool(getattr(sampler, "shuffle", True))

    def on_run_end(self) -> None:
        from traindoctor.runtime.live import site_kwargs

        for state in self.order:
            epochs = state.epochs
            if len(epochs) < 2 or not state.shuffle or len(set(epochs)) > 1:
                continue
            self.report(
                f"This DistributedSampler was iterated {len(epochs)} times with epoch "
                f"{epochs[0]} every time, so each epoch repeats the same order; call "
                "`sampler.set_epoch(epoch)` at the start of every epoch.",
                evidence={
                    "iterations": len(epochs),
                    "epoch_value": epochs[0],
                    "set_epoch_calls": state.set_epoch,
                    "num_replicas": state.replicas,
                },
                **site_kwargs(state.site),
            )
