"""TD202 batchnorm-small-batch: BatchNorm normalises over a small per-forward batch while the optimizer sees more."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.vocab import HF_TRIGGERS

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: Per-forward batches below this are reported (BatchNorm statistics get noisy below ~16).
SMALL_BATCH = 16


class BatchnormSmallBatch(Rule):
    code = "TD202"
    name = "batchnorm-small-batch"
    severity = Severity.WARNING
    summary = (
        "BatchNorm normalises over a small per-forward batch (gradient accumulation or a small "
        "per-GPU batch); use GroupNorm/LayerNorm, SyncBatchNorm or a larger per-forward batch."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("DataLoader", *HF_TRIGGERS)
    fixable = "never"

    what_it_does = """
    Reports the `batch_size` of a training DataLoader when it is below 16 (a literal, a constant
    or an argparse default), the file builds BatchNorm layers (`nn.BatchNorm1d/2d/3d` or a
    torchvision classifier that contains them, such as `resnet50`), and the small batch is not
    what the optimizer sees: gradients are accumulated over several forwards (the loss divided by
    an accumulation count, `optimizer.step()` under `if (i + 1) % k == 0`,
    `Accelerator(gradient_accumulation_steps=k)`) or the script is data-parallel (DDP, FSDP,
    accelerate), so the batch is per GPU. Files that use `SyncBatchNorm` are left alone.

    Framework forms: Hugging Face `TrainingArguments(gradient_accumulation_steps=k)` with a
    `per_device_train_batch_size` below 16 (its default is 8) for a Trainer whose model has
    BatchNorm; Lightning's `Trainer(accumulate_grad_batches=k)` with the batch of the module's
    `train_dataloader()`; `Accelerator(gradient_accumulation_steps=k)` with the batch of the
    loader it prepares.
    """
    why_bad = """
    BatchNorm computes its mean and variance over the samples of one forward pass on one device.
    Gradient accumulation and data parallelism enlarge the batch the *optimizer* sees
    (`batch x accumulation x world_size`) but not the one BatchNorm sees. With fewer than about
    16 samples the batch statistics are noisy, training degrades, and the running statistics used
    at evaluation time no longer match training (Wu & He 2018 measure the error of ResNet-50
    rising sharply as the per-GPU batch goes from 32 to 2). Accumulating gradients does not
    help: every forward still normalises over its own few samples.
    """
    example = """
    import torch, torchvision

    model = torchvision.models.resnet50()
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True)
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.cross_entropy(model(x), y) / 8
        loss.backward()
        if (i + 1) % 8 == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    use_instead = """
    import torch, torchvision
    from traindoctor.recipes import convert_batchnorm

    # GroupNorm does not depend on the batch size (or: SyncBatchNorm under DDP).
    model = convert_batchnorm(torchvision.models.resnet50(), to="group")
    loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True)
    """
    options = """
    `TD202.min_batch` (default 16): BatchNorm layers that track running statistics must see at
    least this many samples per training-mode forward (the most common leading dimension of their
    inputs, over forwards with autograd on). Evidence: that batch, the backward() calls per
    optimizer step, the effective batch. Under DDP (world size > 1) without gradient accumulation
    the runtime leaves the finding to TD602 (SyncBatchNorm is the fix there).
    """
    references = (
        "https://arxiv.org/abs/1803.08494",
        "https://arxiv.org/abs/1502.03167",
        "https://pytorch.org/docs/stable/generated/torch.nn.SyncBatchNorm.html",
    )

    valid = (
        Valid("""
        import torch
        from torch import nn

        model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU())
        loader = torch.utils.data.DataLoader(dataset, batch_size=64, shuffle=True)
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y) / 4
            loss.backward()
            if (i + 1) % 4 == 0:
                optimizer.step()
                optimizer.zero_grad()
        """),
        Valid("""
        import torch
        from torch import nn

        # GroupNorm: independent of the batch size
        model = nn.Sequential(nn.Conv2d(3, 32, 3), nn.GroupNorm(8, 32), nn.ReLU())
        loader = torch.utils.data.DataLoader(dataset, batch_size=2)
        accum_steps = 16
        for i, (x, y) in enumerate(loader):
            (criterion(model(x), y) / accum_steps).backward()
            if (i + 1) % accum_steps == 0:
                optimizer.step()
        """),
        Valid("""
        import torch
        import torch.distributed as dist
        import torchvision
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("nccl")
        model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(torchvision.models.resnet18())
        model = DDP(model.cuda())
        loader = torch.utils.data.DataLoader(dataset, batch_size=8, sampler=sampler)
        for x, y in loader:
            criterion(model(x), y).backward()
        """),
        Valid("""
        import torch
        import torchvision

        # a small evaluation batch is fine: BatchNorm uses running statistics in eval mode
        model = torchvision.models.resnet50()
        train_loader = torch.utils.data.DataLoader(train_set, batch_size=128, shuffle=True)
        val_loader = torch.utils.data.DataLoader(val_set, batch_size=4)
        accum = 2
        for step, (x, y) in enumerate(train_loader):
            (criterion(model(x), y) / accum).backward()
        """),
        Valid("""
        import torchvision
        from transformers import Trainer, TrainingArguments

        model = torchvision.models.resnet50(num_classes=10)
        args = TrainingArguments(output_dir="out", per_device_train_batch_size=32, gradient_accumulation_steps=4)
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """),
        Valid("""
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        # a transformer: LayerNorm does not depend on the batch
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        args = TrainingArguments(output_dir="out", per_device_train_batch_size=2, gradient_accumulation_steps=16)
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """),
    )
    invalid = (
        Invalid("""
        import torch
        import torchvision

        model = torchvision.models.resnet50()
        loader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True)  # TD202
        for i, (x, y) in enumerate(loader):
            loss = torch.nn.functional.cross_entropy(model(x), y) / 8
            loss.backward()
            if (i + 1) % 8 == 0:
                optimizer.step()
                optimizer.zero_grad()
        """),
        Invalid("""
        import argparse
        import torch.nn as nn
        from torch.utils.data import DataLoader as DL

        parser = argparse.ArgumentParser()
        parser.add_argument("--batch-size", type=int, default=8)
        parser.add_argument("--grad-accum-steps", type=int, default=4)
        args = parser.parse_args()

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 16, 3)
                self.bn = nn.BatchNorm2d(16)

        model = Net()
        loader = DL(train_set, args.batch_size, True)  # TD202
        for step, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            (loss / args.grad_accum_steps).backward()
        """),
        Invalid("""
        import torch
        import torch.distributed as dist
        from torch import nn
        from torch.nn.parallel import DistributedDataParallel

        def main():
            dist.init_process_group("nccl")
            model = nn.Sequential(nn.Conv1d(12, 64, 7), nn.BatchNorm1d(64), nn.ReLU())
            model = DistributedDataParallel(model.cuda())
            loader = torch.utils.data.DataLoader(ds, **{"batch_size": 2, "num_workers": 4})  # TD202
            for x, y in loader:
                criterion(model(x), y).backward()
        """),
        Invalid("""
        import torchvision
        from transformers import Trainer, TrainingArguments

        model = torchvision.models.resnet50(num_classes=10)
        args = TrainingArguments(
            output_dir="out",
            gradient_accumulation_steps=16,  # TD202 (the default per-device batch is 8)
            dataloader_num_workers=4,
        )
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """),
        Invalid("""
        import lightning as L
        import torch.nn as nn
        from torch.utils.data import DataLoader

        class Segmenter(L.LightningModule):
            def __init__(self, batch_size: int = 4):
                super().__init__()
                self.batch_size = batch_size
                self.net = nn.Sequential(nn.Conv2d(3, 64, 3), nn.BatchNorm2d(64), nn.ReLU())

            def training_step(self, batch, batch_idx):
                return self.loss(self.net(batch[0]), batch[1])

            def train_dataloader(self):
                return DataLoader(self.train_set, batch_size=self.batch_size, num_workers=4)  # TD202

        L.Trainer(accumulate_grad_batches=8).fit(Segmenter())
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.batching.static import accumulation, distributed, training_batches, trains
        from traindoctor.facts.models.static import file_has_batchnorm, uses_syncbatchnorm

        yield from self._check_hf(ctx)
        if not trains(ctx) or file_has_batchnorm(ctx) is None or uses_syncbatchnorm(ctx):
            return
        acc = accumulation(ctx)
        dist = distributed(ctx)
        if acc is None and dist is None:
            return
        for lb in training_batches(ctx):
            batch = lb.value
            if isinstance(batch, bool) or not isinstance(batch, int) or not 0 < batch < SMALL_BATCH:
                continue
            if acc is not None:
                factor = acc.factor if isinstance(acc.factor, int) else "k"
                why = f"the optimizer steps on {batch} x {factor} samples through gradient accumulation"
            else:
                why = "the batch is per process under data parallelism"
            yield ctx.report(
                self,
                lb.anchor(ctx),
                f"BatchNorm normalises over only {batch} samples per forward while {why}; use "
                "GroupNorm/LayerNorm, SyncBatchNorm or a per-forward batch of at least 16.",
                help="Replace BatchNorm or enlarge the per-forward batch",
            )

    def _check_hf(self, ctx: FileContext) -> Iterable[Finding]:
        """``TrainingArguments(gradient_accumulation_steps=k)`` for a model with BatchNorm."""
        from traindoctor.facts.frameworks.static import hf_trainer_model, hf_training_args
        from traindoctor.facts.models.static import model_of, uses_syncbatchnorm

        for args in hf_training_args(ctx):
            steps = args.value(ctx, "gradient_accumulation_steps")
            batch = args.value(ctx, "per_device_train_batch_size")
            if not (isinstance(steps, int) and not isinstance(steps, bool) and steps > 1):
                continue
            if isinstance(batch, bool) or not isinstance(batch, int) or not 0 < batch < SMALL_BATCH:
                continue
            model = hf_trainer_model(ctx, args)
            if model is None or not model_of(ctx, model).has_batchnorm or uses_syncbatchnorm(ctx):
                continue
            given = isinstance(args.node(ctx, "per_device_train_batch_size"), ast.AST)
            yield ctx.report(
                self,
                args.anchor(ctx, "per_device_train_batch_size" if given else "gradient_accumulation_steps"),
                f"BatchNorm normalises over only {batch} samples per forward"
                f"{'' if given else ' (the default `per_device_train_batch_size`)'} while the "
                f"optimizer steps on {batch} x {steps} samples through `gradient_accumulation_steps`; "
                "use GroupNorm/LayerNorm or a per-device batch of at least 16.",
                help="Replace BatchNorm or enlarge the per-device batch",
            )


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor  # noqa: E402


class BatchnormSmallBatchMonitor(Monitor):
    """Training-mode BatchNorm forwards over a small per-forward batch.

    The batch is the most common leading dimension of the inputs of BatchNorm layers (not
    SyncBatchNorm) that track running statistics, over train-mode forwards with autograd on.
    Under DDP without gradient accumulation the same situation is TD602's (SyncBatchNorm is the
    fix there), so this monitor stays silent then.
    """

    rule = BatchnormSmallBatch

    def on_run_end(self) -> None:
        from traindoctor.facts.batching.runtime import StepFacts, small_batchnorm_batch

        self.steps = StepFacts.of(self.session)  # the session's step records: no per-step hook
        if not self.steps.backward_calls:
            return

        min_batch = int(self.threshold("min_batch", 16))
        small = small_batchnorm_batch(self.session, min_batch)
        if small is None:
            return
        layers, batch = small
        accumulation = self.steps.accumulation()
        world = max(int(getattr(self.session, "world_size", 1) or 1), 1)
        if world > 1 and accumulation <= 1:
            return  # TD602 (batchnorm-without-syncbn) covers it
        total = batch * accumulation * world
        why = f" ({accumulation} backward() calls per optimizer step)" if accumulation > 1 else ""
        samples = "1 sample" if batch == 1 else f"{batch} samples"
        self.report(
            f"BatchNorm normalises over {samples} per forward while the optimizer sees "
            f"{total} per step{why}; use GroupNorm/LayerNorm "
            "(`traindoctor.recipes.convert_batchnorm`) or a larger per-forward batch.",
            evidence={
                "batchnorm_batch": batch,
                "batchnorm_layers": len(layers),
                "backward_per_step": accumulation,
                "world_size": world,
                "effective_batch": total,
                "min_batch": min_batch,
            },
            step=self.session.step,
            **self._batch_site(batch),
        )

    def _batch_site(self, batch: int) -> dict[str, Any]:
        """Where the small batch is set, as the checker reports it: the training DataLoader whose
        ``batch_size`` is the per-forward batch (none: the finding names no line)."""
        from traindoctor.facts.data import runtime as ev

        for info in self.session.loaders:
            if info.feeds_training and info.batch_size == batch and info.row:
                return ev.site(info)
        return {}
