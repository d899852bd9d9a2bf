"""TD103 workers-respawned: a loader with workers, iterated every epoch, restarts them each time."""

from __future__ import annotations

import ast
import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from traindoctor.finding import Finding, Fix, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.args import MISSING, UNKNOWN
from traindoctor.static.names import dotted
from traindoctor.static.vocab import HF_TRIGGERS

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.facts.data.static import Loader
    from traindoctor.static.context import FileContext

_HELP = "Pass `persistent_workers=True`"
_HELP_HF = "Pass `dataloader_persistent_workers=True`"


class WorkersRespawned(Rule):
    code = "TD103"
    name = "workers-respawned"
    severity = Severity.WARNING
    summary = (
        "A DataLoader with worker processes is iterated once per epoch without "
        "`persistent_workers=True`, so its workers are shut down and started again every epoch; "
        "pass `persistent_workers=True`."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("DataLoader", *HF_TRIGGERS)
    project_aware = True
    fixable = "sometimes"
    options = """
    Runtime thresholds (`thresholds` in `[tool.traindoctor]`, `--threshold KEY=VALUE` or
    `watch(thresholds=...)`). Start-up is the time from `iter(loader)` to the first batch of an
    epoch that started new workers, minus an ordinary batch wait; the first start is not counted
    (persistence cannot save it).

    - `TD103.min_startup_s` (default 0.05): median start-up seconds per re-spawning pass.
    - `TD103.min_startup_share` (default 0.05): what the re-spawns cost one epoch of the training
      loop (start-up per pass x passes per epoch), as a share of that epoch (the time between the
      training loader's epoch starts); the same yardstick for a training and an evaluation loader.
    """

    what_it_does = """
    Reports a training `DataLoader` with `num_workers > 0` (a literal, constant, literal
    `**kwargs` dict or argparse default) and without `persistent_workers=True`, when the loader is
    iterated more than once: a `for` loop (or `iter()`) over it sits inside another loop, such as
    an epoch loop, directly or through a function that is called inside a loop, or it is the
    `train_dataloader` hook of a Lightning module. A loader that is consumed once, or through one
    iterator (`it = iter(loader)` once, then `next(it)` or `for ... in it` in the loop), is fine,
    and so is a loader that is rebuilt inside the loop (persistent workers would not help it). A
    rebinding under a condition inside the loop (`if changed: loader = build()`) does not hide the
    loader bound before the loop. Loops that never read their batches (a data-loading benchmark)
    are not training passes.

    Framework forms: Hugging Face `TrainingArguments(dataloader_num_workers=k)` with `k > 0` and
    without `dataloader_persistent_workers=True` (the Trainer starts a new pass over its training
    DataLoader every epoch; a run of at most one epoch is left alone). The fix adds
    `dataloader_persistent_workers=True`.
    """
    why_bad = """
    Without `persistent_workers`, every `iter(loader)` (every `for` over the loader) starts
    `num_workers` new processes, each of which copies or re-imports the dataset object and runs
    `worker_init_fn`, and they are shut down when the pass ends. The first batches of each epoch
    wait for that start-up; with heavy datasets (large annotation files, open archives) or many
    workers it costs seconds per epoch, and the pipeline is empty at every epoch boundary.
    `persistent_workers=True` keeps the worker processes alive between passes.
    """
    example = """
    loader = DataLoader(train_ds, batch_size=64, num_workers=8)
    for epoch in range(epochs):
        for x, y in loader:
            ...
    """
    use_instead = """
    loader = DataLoader(train_ds, batch_size=64, num_workers=8, persistent_workers=True)
    for epoch in range(epochs):
        for x, y in loader:
            ...

    # or size the workers for this machine and keep them alive:
    from traindoctor.recipes import loader_kwargs
    loader = DataLoader(train_ds, batch_size=64, **loader_kwargs(train_ds))
    """
    fix_safety = """
    The fix adds `persistent_workers=True` (or turns a literal `False` into `True`). When
    `num_workers` is not a literal (an argparse option, a variable) it adds
    `persistent_workers=<num_workers> > 0` instead, because `persistent_workers=True` raises with
    `num_workers=0`. The fix is marked unsafe when the loop changes the dataset between epochs
    (a method call on it or an assignment to one of its attributes): persistent workers keep the
    copy of the dataset they started with, so they would not see those changes.
    """
    references = (
        "https://pytorch.org/docs/stable/data.html#torch.utils.data.DataLoader",
        "https://lightning.ai/docs/pytorch/stable/advanced/speed.html#persistent-workers",
    )

    valid = (
        Valid(
            """
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=64, num_workers=8, persistent_workers=True)
            for epoch in range(10):
                for x, y in loader:
                    model(x).sum().backward()
            """
        ),
        # One endless iterator: the workers start once.
        Valid(
            """
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=64, num_workers=8)
            it = iter(loader)
            for step in range(100_000):
                x, y = next(it)
                model(x).sum().backward()
            """
        ),
        # One iterator made before the epoch loop and drawn from by every epoch's loop.
        Valid(
            """
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=64, num_workers=8, sampler=InfiniteSampler(train_ds))
            loader = iter(loader)
            for epoch in range(10):
                for step, (x, y) in zip(range(1000), loader):
                    model(x).sum().backward()
            """
        ),
        # A data-loading benchmark: the loop never reads its batches, nothing trains.
        Valid(
            """
            import time
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=64, num_workers=8)
            for epoch in range(3):
                start = time.time()
                for i, _ in enumerate(loader):
                    pass
                print(epoch, time.time() - start)
            """
        ),
        # Consumed once, and a loader rebuilt inside the epoch loop (nothing to persist).
        Valid(
            """
            from torch.utils.data import DataLoader

            once = DataLoader(train_ds, batch_size=64, num_workers=4)
            for x, y in once:
                model(x).sum().backward()
            for epoch in range(10):
                loader = DataLoader(shard(epoch), batch_size=64, num_workers=4)
                for x, y in loader:
                    model(x).sum().backward()
            """
        ),
        # No workers at all, and an evaluation loader.
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            train_loader = DataLoader(train_ds, batch_size=64)
            val_loader = DataLoader(val_ds, batch_size=64, num_workers=4)
            for epoch in range(10):
                for x, y in train_loader:
                    model(x).sum().backward()
                with torch.no_grad():
                    for x, y in val_loader:
                        model(x)
            """
        ),
        Valid("""
        from transformers import Trainer, TrainingArguments

        # one pass over the data: nothing to keep alive
        args = TrainingArguments(output_dir="out", num_train_epochs=1, dataloader_num_workers=8)
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """),
        Valid("""
        from transformers import Trainer, TrainingArguments

        args = TrainingArguments(output_dir="out", dataloader_num_workers=8, dataloader_persistent_workers=True)
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """),
    )
    invalid = (
        Invalid(
            """
            from torch.utils.data import DataLoader

            train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, num_workers=8)  # TD103
            for epoch in range(10):
                for x, y in train_loader:
                    model(x).sum().backward()
            """,
            fixed="""
            from torch.utils.data import DataLoader

            train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, num_workers=8, persistent_workers=True)  # TD103
            for epoch in range(10):
                for x, y in train_loader:
                    model(x).sum().backward()
            """,
        ),
        # Through a function called in the epoch loop, with an alias and positional workers.
        Invalid(
            """
            import torch.utils.data as tud

            def train_one_epoch(model, loader, optimizer):
                for i, (x, y) in enumerate(loader):
                    optimizer.zero_grad()
                    model(x).sum().backward()
                    optimizer.step()

            loader = tud.DataLoader(ds, 32, True, None, None, 4)  # TD103
            for epoch in range(90):
                train_one_epoch(model, loader, optimizer)
            """,
            fixed="""
            import torch.utils.data as tud

            def train_one_epoch(model, loader, optimizer):
                for i, (x, y) in enumerate(loader):
                    optimizer.zero_grad()
                    model(x).sum().backward()
                    optimizer.step()

            loader = tud.DataLoader(ds, 32, True, None, None, 4, persistent_workers=True)  # TD103
            for epoch in range(90):
                train_one_epoch(model, loader, optimizer)
            """,
        ),
        # Argparse default: the fix keeps `--workers 0` working.
        Invalid(
            """
            import argparse
            from torch.utils.data import DataLoader

            parser = argparse.ArgumentParser()
            parser.add_argument("--workers", type=int, default=4)
            args = parser.parse_args()
            train_loader = DataLoader(train_ds, batch_size=64, num_workers=args.workers)  # TD103
            for epoch in range(args.epochs):
                for x, y in train_loader:
                    model(x).sum().backward()
            """,
            fixed="""
            import argparse
            from torch.utils.data import DataLoader

            parser = argparse.ArgumentParser()
            parser.add_argument("--workers", type=int, default=4)
            args = parser.parse_args()
            train_loader = DataLoader(train_ds, batch_size=64, num_workers=args.workers, persistent_workers=args.workers > 0)  # TD103
            for epoch in range(args.epochs):
                for x, y in train_loader:
                    model(x).sum().backward()
            """,
        ),
        # A self attribute iterated by a method that fit() calls every epoch; the `False` sits in
        # a dict, so the finding comes without a fix.
        Invalid(
            """
            from torch.utils.data import DataLoader

            class Trainer:
                def __init__(self, ds):
                    self.ds = ds
                    opts = {"batch_size": 64, "num_workers": 6, "persistent_workers": False}
                    self.train_loader = DataLoader(ds, **opts)  # TD103

                def train_epoch(self):
                    for x, y in self.train_loader:
                        self.model(x).sum().backward()

                def fit(self, epochs):
                    for epoch in range(epochs):
                        self.train_epoch()
            """,
        ),
        Invalid(
            """
        from transformers import Trainer, TrainingArguments

        args = TrainingArguments(
            output_dir="out",
            num_train_epochs=10,
            dataloader_num_workers=8,  # TD103
        )
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """,
            fixed="""
        from transformers import Trainer, TrainingArguments

        args = TrainingArguments(
            output_dir="out",
            num_train_epochs=10,
            dataloader_num_workers=8, dataloader_persistent_workers=True,  # TD103
        )
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """,
        ),
        Invalid("""
        import os
        import torch

        loader_args = dict(batch_size=8, num_workers=os.cpu_count(), pin_memory=True)
        train_loader = torch.utils.data.DataLoader(train_set, shuffle=True, **loader_args)  # TD103
        for epoch in range(1, 6):
            for images, masks in train_loader:
                criterion(model(images), masks).backward()
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import is_test_file, loader_index, may_build_loaders
        from traindoctor.facts.frameworks.static import lightning_hparam

        if is_test_file(ctx.filename):
            return
        if not may_build_loaders(ctx):
            yield from self._check_hf(ctx)
            return
        for loader in loader_index(ctx).training_loaders():
            call = loader.call
            workers = loader.arg(ctx, "num_workers")
            if workers is MISSING or workers is UNKNOWN:
                continue
            workers = cast(ast.expr, workers)  # neither sentinel: a node
            count = ctx.value(workers)
            exact = True
            if count is UNKNOWN and isinstance(workers, ast.Attribute):
                # ``args.workers = ceil(args.workers / gpus)``: the declared default still says the
                # loader uses workers, but not how many.
                count, exact = ctx.argparse_default(workers, declared=True), False
                if count is UNKNOWN:
                    count = lightning_hparam(ctx, workers, declared=True)
            if count is UNKNOWN and _one_per_core(ctx, workers):
                count, exact = 1, False  # ``num_workers=os.cpu_count()``: workers, however many
            if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
                continue
            counted = f"{count} " if exact else ""
            persistent = loader.arg(ctx, "persistent_workers")
            if persistent is UNKNOWN:
                continue
            if persistent is not MISSING:
                value = ctx.value(persistent)
                if value is UNKNOWN or value:
                    continue
            site = loader.repeated_site
            if site is None:
                continue
            loop = site.repeated_by
            where = f"line {ctx.location(loop).row}" if loop is not None else "each epoch"
            if site.kind == "hook":
                message = (
                    f"Lightning iterates this `train_dataloader` every epoch and its {counted}workers "
                    "are restarted each time; pass `persistent_workers=True`."
                )
            else:
                message = (
                    f"This loader is iterated again on every pass of the loop at {where} and its "
                    f"{counted}worker processes are restarted each time; pass `persistent_workers=True`."
                )
            fix = self._fix(ctx, loader, workers, persistent) if loader.factory is None else None
            yield ctx.report(self, call, message, fix=fix, help=_HELP, related=(*loader.related, *site.related))

        yield from self._check_hf(ctx)

    def _check_hf(self, ctx: FileContext) -> Iterable[Finding]:
        """``TrainingArguments(dataloader_num_workers=k)`` without ``dataloader_persistent_workers``:
        the Trainer builds a new training DataLoader iterator every epoch."""
        from traindoctor.facts.data.static import literal_false
        from traindoctor.facts.frameworks.static import hf_training_args

        for args in hf_training_args(ctx):
            workers = args.value(ctx, "dataloader_num_workers")
            if not isinstance(workers, int) or isinstance(workers, bool) or workers <= 0:
                continue
            if args.value(ctx, "dataloader_persistent_workers") is not False:
                continue
            epochs, max_steps = args.value(ctx, "num_train_epochs"), args.value(ctx, "max_steps")
            if isinstance(epochs, (int, float)) and epochs <= 1 and max_steps in (-1, 0):
                continue  # one pass over the training data
            persistent = args.node(ctx, "dataloader_persistent_workers")
            if args.parsed:
                fix = None  # the command line's default: nothing to insert into the parse
            elif persistent is MISSING:
                fix = ctx.fix_add_keyword(args.call, "dataloader_persistent_workers=True", _HELP_HF)
            elif literal_false(persistent) and _in_call(ctx, persistent, args.call):
                fix = ctx.fix_replace(persistent, "True", _HELP_HF)
            else:
                fix = None
            yield ctx.report(
                self,
                args.anchor(
                    ctx, "dataloader_persistent_workers" if persistent is not MISSING else "dataloader_num_workers"
                ),
                f"The Trainer iterates its training DataLoader once per epoch and its {workers} "
                "worker processes are restarted each time; pass `dataloader_persistent_workers=True`.",
                fix=fix,
                help=_HELP_HF,
            )

    def _fix(self, ctx: FileContext, loader: Loader, workers: ast.AST, persistent: object) -> Fix | None:
        from traindoctor.facts.data.static import literal_false

        call = loader.call
        if isinstance(workers, ast.Constant):
            text = "True"
        elif _in_call(ctx, workers, call) and isinstance(workers, (ast.Name, ast.Attribute)):
            text = f"{ctx.segment(workers)} > 0"
        else:
            return None
        applicability = "unsafe" if _loop_changes_dataset(ctx, loader) else "safe"
        if persistent is MISSING:
            return ctx.fix_add_keyword(call, f"persistent_workers={text}", _HELP, applicability)
        if isinstance(persistent, ast.AST) and literal_false(persistent) and _in_call(ctx, persistent, call):
            return ctx.fix_replace(persistent, text, _HELP, applicability)
        return None


_CORE_COUNTS = frozenset(
    {"os.cpu_count", "multiprocessing.cpu_count", "torch.multiprocessing.cpu_count", "psutil.cpu_count"}
)


def _one_per_core(ctx: FileContext, node: ast.AST, depth: int = 0) -> bool:
    """``os.cpu_count()`` (through a name bound once, or ``min``/``max`` with positive constants):
    as many workers as cores, which is at least one wherever training runs."""
    if depth > 3:
        return False
    if isinstance(node, ast.Name):
        bound = ctx.binding(node)
        return bound is not None and _one_per_core(ctx, bound, depth + 1)
    if not isinstance(node, ast.Call):
        return False
    if ctx.qualname(node.func) in _CORE_COUNTS:
        return True
    if isinstance(node.func, ast.Name) and node.func.id in ("min", "max") and node.func.id not in ctx.imports.names:
        if node.keywords or not node.args:
            return False
        others = [a for a in node.args if not _one_per_core(ctx, a, depth + 1)]
        if len(others) == len(node.args):
            return False
        return all(isinstance(v := ctx.value(a), int) and not isinstance(v, bool) and v > 0 for a in others)
    return False


def _in_call(ctx: FileContext, node: ast.AST, call: ast.Call) -> bool:
    parent = ctx.parent(node)
    if isinstance(parent, ast.keyword):
        parent = ctx.parent(parent)
    return parent is call


def _loop_changes_dataset(ctx: FileContext, loader: Loader) -> bool:
    """Whether the repeating loop calls a method of, or assigns to, the loader's dataset."""
    site = loader.repeated_site
    loop = site.repeated_by if site is not None else None
    dataset = ctx.arg(loader.call, "dataset")
    if loop is None or not isinstance(dataset, (ast.Name, ast.Attribute)):
        return False
    prefixes = {f"{dotted(dataset)}."}
    prefixes |= {f"{dotted(r)}.dataset." for r in loader.refs if dotted(r)}
    for node in ctx.walk(loop):
        target = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            target = node
        if target is not None:
            text = dotted(target) or ""
            if any(text.startswith(p) for p in prefixes):
                return True
    return False


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class WorkersRespawnedMonitor(Monitor):
    """Loaders whose worker processes were started again at every epoch, with visible cost."""

    rule = WorkersRespawned

    def on_run_end(self) -> None:
        from traindoctor.facts.data import runtime as ev
        from traindoctor.facts.data.pipeline import keep_workers

        min_s = float(self.threshold("min_startup_s", 0.05))
        min_share = float(self.threshold("min_startup_share", 0.05))
        for info in self.session.loaders:
            if not keep_workers(info.num_workers) or info.persistent_workers or info.spawns < 2:
                continue
            # The first start is unavoidable; the later ones are what persistence saves.
            repeated = info.startup_s[1:]
            if not repeated or info.active_s <= 0:
                continue
            steady = ev.loader_timing(info)
            per_batch_s = steady.wait_ms_per_batch / 1000.0
            extra = sorted(max(s - per_batch_s, 0.0) for s in repeated)
            per_epoch = statistics.median(extra)  # one slow start (a page-cache miss) decides nothing
            period = ev.epoch_period_s(self.session, info)
            if period <= 0:
                continue
            # The share of the training loop's epoch, the same yardstick for every loader (a test
            # loader's restarts weigh what they cost the epoch, not what they cost its short pass).
            share = min(per_epoch * ev.passes_per_epoch(self.session, info) / period, 1.0)
            if per_epoch < min_s or share < min_share:
                continue
            self.report(
                f"This DataLoader started its {info.num_workers} worker "
                f"process{'' if info.num_workers == 1 else 'es'} anew each of the {info.spawns} "
                f"times it was iterated, {per_epoch:.2f} s each time ({share:.0%} of an epoch of "
                "the training loop); pass `persistent_workers=True` to keep the workers between passes.",
                evidence={
                    "startup_s_per_epoch": round(per_epoch, 4),
                    "startup_share": round(share, 4),
                    "respawns": len(repeated),
                    "epochs": info.epochs,
                    "num_workers": info.num_workers,
                },
                step=self.session.step or None,
                help="Pass `persistent_workers=True`.",
                **ev.site(info),
            )
