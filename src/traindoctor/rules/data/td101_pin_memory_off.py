"""TD101 pin-memory-off: a training DataLoader feeds a CUDA model from pageable host memory."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.args import MISSING, UNKNOWN
from traindoctor.static.vocab import HF_TRIGGERS

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.records import LoaderInfo
    from traindoctor.static.context import FileContext

_HELP = "Pass `pin_memory=True`"

_HELP_HF = "Set `dataloader_pin_memory=True`"


class PinMemoryOff(Rule):
    code = "TD101"
    name = "pin-memory-off"
    severity = Severity.WARNING
    summary = (
        "A DataLoader feeds a model on a CUDA device without `pin_memory=True`; pass it so batches "
        "are copied from page-locked memory, asynchronously."
    )
    gpu_only = True
    static = True
    runtime = True
    triggers = ("DataLoader", *HF_TRIGGERS)
    project_aware = True
    fixable = "sometimes"
    options = """
    Runtime thresholds (`thresholds` in `[tool.traindoctor]`, `--threshold KEY=VALUE` or
    `watch(thresholds=...)`):

    - `TD101.min_copies` (default 3): batches of one unpinned training loader copied to CUDA in
      steady training steps (step 1, with its start-up costs, is left out) before it is reported.
    - `TD101.min_transfer_share` (default 0.01): the copies' time as a share of step time. On a
      CUDA run it is device time (CUDA events around the copies, over the GPU's step time); the
      host time of the `.to()` call is not copy time (a blocking copy first waits for every kernel
      queued before it), and is used only when no step could be timed on the device.

    Only reported when the run used a CUDA device; never on a CPU run. Evaluation loaders are not
    counted.
    """

    what_it_does = """
    Reports a training `DataLoader` in a script that runs on a CUDA device when the loader does
    not pass `pin_memory=True` (it is missing, or `False` as a literal, a constant or an argparse
    default). Evaluation loaders (named `val`/`test`/`eval`..., only iterated under
    `torch.no_grad()`, or by a loop that runs its model under `no_grad` and steps no optimizer,
    as feature extraction does), loaders whose loops never read their batches, and datasets whose
    tensors already live on the GPU are skipped, and so are files with no sign of training (no
    `backward()`, no optimizer, no epoch loop). Reads such as `len(loader)` or `loader.sampler`
    say nothing about what a loader is for.

    Framework forms: Hugging Face `TrainingArguments(dataloader_pin_memory=False)` in a script
    that trains a `Trainer` (the default `True` pins; `use_cpu=True` is left alone). A Lightning
    module's `train_dataloader()` builds a training loader like any other, and a Lightning
    `Trainer`/`Fabric` with the default `accelerator="auto"` (or a GPU one) or an
    `accelerate.Accelerator` counts as training on CUDA: they pick the GPU whenever there is one
    and keep the loader's own `pin_memory` setting (`accelerator.prepare` and
    `fabric.setup_dataloaders` do not pin).
    """
    why_bad = """
    A host-to-device copy can only be done by the GPU's DMA engine from page-locked ("pinned")
    host memory. From ordinary pageable memory the CUDA driver first copies the batch into a
    pinned staging buffer, then to the device: an extra copy at a fraction of the bandwidth, and
    the call holds the host until it is done (`non_blocking=True` does nothing for pageable
    memory). With `pin_memory=True` the loader pins each batch in a background thread, so the copy
    is a single DMA transfer, and `.to("cuda", non_blocking=True)` returns at once: the host goes
    on queuing kernels instead of waiting. On the default stream the copy still runs in order
    with the kernels around it (it waits for the ones queued before it, and the next ones wait
    for it); overlapping copies with compute takes a separate copy stream, as data prefetchers do.

    Pinning is not free (pinned memory is taken away from the OS page cache and pinning itself
    costs CPU time), which is why it is only reported for loaders that feed a GPU. Pair it with
    `non_blocking=True` on the `.to(...)` call, or the host still waits for each copy.
    """
    example = """
    loader = DataLoader(train_ds, batch_size=64, shuffle=True, num_workers=4)
    for x, y in loader:
        x, y = x.to("cuda"), y.to("cuda")
    """
    use_instead = """
    loader = DataLoader(train_ds, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)
    for x, y in loader:
        x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)

    # or let traindoctor pick the loader settings for the device:
    from traindoctor.recipes import loader_kwargs
    loader = DataLoader(train_ds, batch_size=64, shuffle=True, **loader_kwargs(train_ds, device="cuda"))
    """
    fix_safety = """
    The fix adds `pin_memory=True` (or turns a literal `pin_memory=False` into `True`). It is safe:
    the batches hold the same values, only the memory they live in changes. Values that come from
    a constant, a `**kwargs` dict or an argparse default are reported without a fix: edit them at
    their source.
    """
    references = (
        "https://pytorch.org/docs/stable/data.html#memory-pinning",
        "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html",
        "https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#pinned-memory",
    )

    valid = (
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=64, num_workers=4, pin_memory=True)
            model = model.cuda()
            for x, y in loader:
                loss = model(x.cuda(non_blocking=True)).sum()
                loss.backward()
            """
        ),
        # CPU-only script: pinning would only cost time.
        Valid(
            """
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=64, num_workers=4)
            for x, y in loader:
                loss = model(x).sum()
                loss.backward()
            """
        ),
        # Evaluation loader (by name), and a value we cannot know (opaque **kwargs).
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            val_loader = DataLoader(val_ds, batch_size=256)
            train_loader = DataLoader(train_ds, **cfg.loader)
            model.to("cuda")
            for x, y in train_loader:
                model(x.cuda()).sum().backward()
            """
        ),
        # Dataset already on the GPU: pin_memory=True would raise.
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            ds = TensorDataset(x.cuda(), y.cuda())
            loader = DataLoader(ds, batch_size=64, shuffle=True)
            for xb, yb in loader:
                model(xb).sum().backward()
            """
        ),
        # Argparse default True.
        Valid(
            """
            import argparse
            import torch

            p = argparse.ArgumentParser()
            p.add_argument("--pin-memory", action="store_true", default=True)
            args = p.parse_args()
            loader = torch.utils.data.DataLoader(train_ds, batch_size=32, pin_memory=args.pin_memory)
            for x, y in loader:
                model(x.to("cuda")).sum().backward()
            """
        ),
        Valid("""
        from transformers import Trainer, TrainingArguments

        # dataloader_pin_memory defaults to True
        args = TrainingArguments(output_dir="out", dataloader_num_workers=4)
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """),
        Valid("""
        import lightning as L
        from torch.utils.data import DataLoader

        class MNISTModel(L.LightningModule):
            def training_step(self, batch, batch_idx):
                return self.loss(self(batch[0]), batch[1])

            def train_dataloader(self):
                return DataLoader(self.train_set, batch_size=64, num_workers=4)

        # trains on the CPU: pinning would not help
        L.Trainer(max_epochs=5, accelerator="cpu").fit(MNISTModel())
        """),
    )
    invalid = (
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, num_workers=4)  # TD101
            model = model.cuda()
            for x, y in train_loader:
                loss = model(x.cuda()).sum()
                loss.backward()
            """,
            fixed="""
            import torch
            from torch.utils.data import DataLoader

            train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, num_workers=4, pin_memory=True)  # TD101
            model = model.cuda()
            for x, y in train_loader:
                loss = model(x.cuda()).sum()
                loss.backward()
            """,
        ),
        # Alias import and a positional `pin_memory=False` (8th parameter).
        Invalid(
            """
            import torch.utils.data as tud

            device = "cuda"
            loader = tud.DataLoader(ds, 32, True, None, None, 2, None, False)  # TD101
            for x, y in loader:
                model(x.to(device)).sum().backward()
            """,
            fixed="""
            import torch.utils.data as tud

            device = "cuda"
            loader = tud.DataLoader(ds, 32, True, None, None, 2, None, True)  # TD101
            for x, y in loader:
                model(x.to(device)).sum().backward()
            """,
        ),
        # Literal **kwargs dict: reported, but the fix belongs in the dict.
        Invalid(
            """
            import torch
            from torch.utils.data.dataloader import DataLoader as DL

            loader_kwargs = {"batch_size": 64, "num_workers": 4, "pin_memory": False}
            loader = DL(train_set, **loader_kwargs)  # TD101
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                optimizer.zero_grad()
                model(x.to("cuda:0")).sum().backward()
                optimizer.step()
            """
        ),
        # Argparse default False.
        Invalid(
            """
            import argparse
            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--pin-memory", type=int, default=0)
            args = parser.parse_args()
            loader = torch.utils.data.DataLoader(  # TD101
                train_ds,
                batch_size=32,
                pin_memory=args.pin_memory,
            )
            torch.cuda.set_device(0)
            for x, y in loader:
                model(x.cuda()).sum().backward()
            """
        ),
        Invalid(
            """
        from transformers import Trainer, TrainingArguments

        args = TrainingArguments(
            output_dir="out",
            dataloader_num_workers=4,
            dataloader_persistent_workers=True,
            dataloader_pin_memory=False,  # TD101
        )
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """,
            fixed="""
        from transformers import Trainer, TrainingArguments

        args = TrainingArguments(
            output_dir="out",
            dataloader_num_workers=4,
            dataloader_persistent_workers=True,
            dataloader_pin_memory=True,  # TD101
        )
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """,
        ),
        Invalid(
            """
        import lightning as L
        from torch.utils.data import DataLoader

        class MNISTModel(L.LightningModule):
            def training_step(self, batch, batch_idx):
                x, y = batch
                return self.loss(self(x), y)

            def train_dataloader(self):
                return DataLoader(self.train_set, batch_size=64, num_workers=4)  # TD101

        L.Trainer(max_epochs=5, accelerator="gpu").fit(MNISTModel())
        """,
            fixed="""
        import lightning as L
        from torch.utils.data import DataLoader

        class MNISTModel(L.LightningModule):
            def training_step(self, batch, batch_idx):
                x, y = batch
                return self.loss(self(x), y)

            def train_dataloader(self):
                return DataLoader(self.train_set, batch_size=64, num_workers=4, pin_memory=True)  # TD101

        L.Trainer(max_epochs=5, accelerator="gpu").fit(MNISTModel())
        """,
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import iter_training_loaders, literal_false
        from traindoctor.facts.frameworks.static import hf_training_args

        if not ctx.targets_cuda:
            return
        for loader in iter_training_loaders(ctx):
            if loader.on_device:
                continue
            call = loader.call
            node = loader.arg(ctx, "pin_memory")
            if node is UNKNOWN:
                continue
            if node is MISSING:
                fix = ctx.fix_add_keyword(call, "pin_memory=True", _HELP) if loader.factory is None else None
                message = (
                    "This training loader feeds a CUDA model from pageable memory; pass "
                    "`pin_memory=True` (and copy with `non_blocking=True`)."
                )
            else:
                node = cast(ast.expr, node)  # neither MISSING nor UNKNOWN: a node
                value = ctx.value(node)
                if value is UNKNOWN or value:
                    continue
                fix = None
                if loader.factory is None and literal_false(node) and _written_in_call(ctx, node, call):
                    fix = ctx.fix_replace(node, "True", _HELP)
                message = (
                    "`pin_memory` is off for a training loader that feeds a CUDA model; set it to "
                    "`True` (and copy with `non_blocking=True`)."
                )
            yield ctx.report(self, call, message, fix=fix, help=_HELP, related=loader.related)
        for args in hf_training_args(ctx):
            if args.value(ctx, "dataloader_pin_memory") is not False or not args.on_gpu(ctx):
                continue
            node = args.node(ctx, "dataloader_pin_memory")
            fix = ctx.fix_replace(node, "True", _HELP_HF) if literal_false(node) else None
            yield ctx.report(
                self,
                args.anchor(ctx, "dataloader_pin_memory"),
                "`dataloader_pin_memory=False` makes the Trainer copy every batch to the GPU from "
                "pageable memory; leave it at its default `True`.",
                fix=fix,
                help=_HELP_HF,
            )


def _written_in_call(ctx: FileContext, node: ast.AST, call: ast.Call) -> bool:
    """Whether ``node`` is spelled in the call itself (not in a ``**kwargs`` dict elsewhere)."""
    parent = ctx.parent(node)
    if isinstance(parent, ast.keyword):
        parent = ctx.parent(parent)
    return parent is call


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class PinMemoryOffMonitor(Monitor):
    """Batches of a `pin_memory=False` loader copied to CUDA (GPU-only: the session drops this
    finding unless the run used CUDA)."""

    rule = PinMemoryOff

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self._copies: dict[int, list[float]] = {}
        self._infos: dict[int, LoaderInfo] = {}
        self._last_batch: dict[int, int] = {}

    def on_transfer(
        self, nbytes: int, seconds: float, pinned: bool, device_type: str, loader_info: LoaderInfo | None = None
    ) -> None:
        if device_type != "cuda" or pinned or loader_info is None or loader_info.pin_memory:
            return
        key = loader_info.id
        stats = self._copies.get(key)
        if stats is None:
            stats = self._copies[key] = [0.0] * 6
            self._infos[key] = loader_info
        # step 1 (the model's own transfer, cuDNN and allocator start-up) is counted apart; a
        # batch's tensors (x, y, ...) count as one copied batch
        at = 0 if self.session.step >= 1 else 3
        if self._last_batch.get(key) != loader_info.batches:
            self._last_batch[key] = loader_info.batches
            stats[at] += 1
        stats[at + 1] += seconds
        stats[at + 2] += nbytes

    def on_run_end(self) -> None:
        from traindoctor.facts.data import runtime as ev

        min_copies = int(self.threshold("min_copies", 3))
        min_share = float(self.threshold("min_transfer_share", 0.01))
        records = list(self.session.records)
        steady = len(records) > 1  # else (no optimizer step): every copy, over the whole run
        total = sum(r.wall_s for r in records[1:]) if steady else self.session.ended_at - self.session.started_at
        training = {info.id for info in self.session.training_loaders()}
        gpu = self.session.gpu_profile
        for key in sorted(self._copies):
            stats = self._copies[key]
            count, seconds, nbytes = (
                stats[:3] if steady else (stats[0] + stats[3], stats[1] + stats[4], stats[2] + stats[5])
            )
            if key not in training or not count:
                continue
            device = gpu.copies.get(key) if gpu is not None and gpu.span > 0 else None
            if gpu is not None and device is not None:
                per_step = count / max(len(records) - 1, 1)  # batches copied per steady step
                share, ms_per_copy, clock = gpu.share(device[1]), 1000.0 * device[1] / per_step, "device"
            else:
                share = seconds / total if total > 0 else 0.0
                ms_per_copy, clock = 1000.0 * seconds / count, "host"
            if count < min_copies or share < min_share:
                continue
            info = self._infos[key]
            where = "of the GPU's step time" if clock == "device" else "of step time (host time of the copy calls)"
            self.report(
                f"Batches from this DataLoader (`pin_memory=False`) were copied to the GPU from "
                f"pageable memory, {share:.0%} {where}; pass `pin_memory=True` and move batches "
                "with `.to(device, non_blocking=True)`: each copy is then one DMA transfer and "
                "frees the host at once (it still runs in order with the kernels of its stream).",
                evidence={
                    "transfer_share": round(share, 4),
                    "copies": int(count),
                    "ms_per_copy": round(ms_per_copy, 3),
                    "mib_per_copy": round(nbytes / count / 2**20, 3),
                    "clock": clock,
                },
                step=self.session.step or None,
                help="Pass `pin_memory=True`.",
                **ev.site(info),
            )
