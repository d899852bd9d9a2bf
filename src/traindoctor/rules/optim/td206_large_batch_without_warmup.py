"""TD206 large-batch-without-warmup: a large batch trained from the peak LR on step one."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: Effective batches from this size on are "large" (Goyal et al. needed warmup from ~1k on).
LARGE_BATCH = 1024


class LargeBatchWithoutWarmup(Rule):
    code = "TD206"
    name = "large-batch-without-warmup"
    severity = Severity.INFO
    summary = (
        "A large batch is trained from the peak learning rate on the first step; ramp the LR up with a warmup schedule."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("DataLoader",)
    fixable = "never"

    what_it_does = """
    Reports the `batch_size` of a training DataLoader when it is at least 1024 (a literal,
    constant or argparse default), or reaches 1024 once multiplied by a known gradient
    accumulation factor, and the file has no warmup: no `LinearLR`, `OneCycleLR`, `SequentialLR`,
    `CyclicLR` or `ChainedScheduler`, no `LambdaLR` with a ramp-shaped lambda, and nothing named
    like `warmup` (transformers' `get_*_schedule_with_warmup`, timm's `warmup_t`,
    `traindoctor.recipes.warmup_schedule`, a hand-written `warmup_steps`). Evaluation loaders
    are skipped.
    """
    why_bad = """
    Large batches come with large learning rates (linear or square-root scaling), and the first
    steps of training are when the loss surface is sharpest and the weights least conditioned:
    starting at the peak LR there often diverges or lands in a worse region. Goyal et al. (2017)
    trained ResNet-50 with batch 8192 only with a gradual warmup over 5 epochs; without it the
    large-batch runs lost accuracy. Beyond a few thousand samples, layer-wise adaptive optimizers
    (LARS for SGD, LAMB for Adam) are the usual next step, with warmup as well.
    """
    example = """
    import torch

    loader = torch.utils.data.DataLoader(train_set, batch_size=4096, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.6, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    """
    use_instead = """
    import torch
    from traindoctor.recipes import warmup_schedule

    loader = torch.utils.data.DataLoader(train_set, batch_size=4096, shuffle=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.6, momentum=0.9)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs - 5)
    scheduler = warmup_schedule(optimizer, warmup_steps=5, after=cosine)
    """
    options = """
    `TD206.min_batch` (default 1024): the effective batch (samples per optimizer step x world
    size) that counts as large. `TD206.min_lr_factor` (default 4): with a declared
    `reference_lr`, a peak LR at least this many times the reference counts too.
    `TD206.min_steps` (default 2): optimizer steps needed to judge. "No warmup" means every param
    group's LR at the first step is within 0.1 % of its peak over the run.
    """
    references = (
        "https://arxiv.org/abs/1706.02677",
        "https://arxiv.org/abs/1708.03888",
        "https://arxiv.org/abs/1904.00962",
        "https://pytorch.org/docs/stable/generated/torch.optim.lr_scheduler.LinearLR.html",
    )

    valid = (
        Valid("""
        import torch

        loader = torch.utils.data.DataLoader(train_set, batch_size=4096, shuffle=True)
        optimizer = torch.optim.SGD(model.parameters(), lr=1.6, momentum=0.9)
        warm = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.01, total_iters=5)
        cos = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=85)
        scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, cos], milestones=[5])
        for x, y in loader:
            criterion(model(x), y).backward()
        """),
        Valid("""
        import torch
        from transformers import get_linear_schedule_with_warmup

        loader = torch.utils.data.DataLoader(train_set, batch_size=2048)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scheduler = get_linear_schedule_with_warmup(optimizer, 1000, 100000)
        for batch in loader:
            model(**batch).loss.backward()
        """),
        Valid("""
        import torch

        # a large evaluation batch needs no warmup
        train_loader = torch.utils.data.DataLoader(train_set, batch_size=256, shuffle=True)
        val_loader = torch.utils.data.DataLoader(val_set, batch_size=2048)
        for x, y in train_loader:
            criterion(model(x), y).backward()
        """),
        Valid("""
        import torch

        loader = torch.utils.data.DataLoader(train_set, batch_size=1024)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 500))
        for x, y in loader:
            criterion(model(x), y).backward()
        """),
    )
    invalid = (
        Invalid("""
        import torch

        loader = torch.utils.data.DataLoader(train_set, batch_size=4096, shuffle=True)  # TD206
        optimizer = torch.optim.SGD(model.parameters(), lr=1.6, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=90)
        for x, y in loader:
            criterion(model(x), y).backward()
        """),
        Invalid("""
        import argparse
        from torch.utils.data import DataLoader as DL

        parser = argparse.ArgumentParser()
        parser.add_argument("-b", "--batch-size", type=int, default=2048)
        args = parser.parse_args()
        train_loader = DL(train_set, args.batch_size, True, num_workers=8)  # TD206
        for x, y in train_loader:
            loss_fn(model(x), y).backward()
        """),
        Invalid("""
        import torch

        BATCH = 256
        ACCUM_STEPS = 8
        loader = torch.utils.data.DataLoader(train_set, batch_size=BATCH)  # TD206
        for i, (x, y) in enumerate(loader):
            (criterion(model(x), y) / ACCUM_STEPS).backward()
            if (i + 1) % ACCUM_STEPS == 0:
                optimizer.step()
                optimizer.zero_grad()
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.batching.static import accumulation, has_warmup, training_batches, trains

        if not trains(ctx) or has_warmup(ctx):
            return
        acc = accumulation(ctx)
        factor = acc.factor if acc is not None and isinstance(acc.factor, int) else 1
        for lb in training_batches(ctx):
            batch = lb.value
            if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
                continue
            effective = batch * factor
            if effective < LARGE_BATCH:
                continue
            what = f"batch {batch}" if factor == 1 else f"effective batch {batch} x {factor} = {effective}"
            yield ctx.report(
                self,
                lb.anchor(ctx),
                f"Training with {what} starts at the peak learning rate; add a warmup "
                "(`LinearLR` + `SequentialLR`, or `traindoctor.recipes.warmup_schedule`).",
                help="Warm up the learning rate",
            )


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.facts.batching.lr_monitor import LrStepMonitor  # noqa: E402


class LargeBatchWithoutWarmupMonitor(LrStepMonitor):
    """A large effective batch (or an LR scaled up several-fold from a declared reference) with
    the learning rate at its peak from the first step on."""

    rule = LargeBatchWithoutWarmup

    def on_run_end(self) -> None:
        min_steps = int(self.threshold("min_steps", 2))
        if self.lrs.steps < min_steps or not self.lrs.starts_at_peak():
            return
        from traindoctor.facts.batching.runtime import effective_batch

        eff = effective_batch(self.session, self.steps)
        min_batch = int(self.threshold("min_batch", 1024))
        peak = self.lrs.peak_lr() or 0.0
        try:
            ref_lr = float(self.threshold("reference_lr", 0) or 0)
        except (TypeError, ValueError):
            ref_lr = 0.0
        factor = peak / ref_lr if ref_lr > 0 else None
        large = eff is not None and eff.total >= min_batch
        scaled = factor is not None and factor >= float(self.threshold("min_lr_factor", 4.0))
        if not large and not scaled:
            return
        what = (
            f"the effective batch is {eff.total}"
            if large and eff is not None
            else f"the LR is {factor:.3g}x the reference"
        )
        self.report(
            f"{what.capitalize()} and the learning rate starts at its peak ({peak:g}); warm it up "
            "over the first steps (`traindoctor.recipes.warmup_schedule`), and consider LARS/LAMB "
            "beyond a few thousand samples.",
            evidence={
                **(eff.evidence() if eff is not None else {}),
                "first_lrs": [round(v[0], 10) if v else None for v in self.lrs.first],
                "peak_lr": peak,
                "lr_factor": round(factor, 4) if factor else None,
                "min_batch": min_batch,
            },
            step=self.session.step,
        )
