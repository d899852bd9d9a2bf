"""TD203 lr-not-scaled: the effective batch grows with world size or accumulation but the LR does not."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.finding import Related
    from traindoctor.static.context import FileContext


class LrNotScaled(Rule):
    code = "TD203"
    name = "lr-not-scaled"
    severity = Severity.WARNING
    summary = (
        "The effective batch grows with the world size or gradient accumulation while the "
        "learning rate stays fixed; scale the LR with the effective batch (and warm up)."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("optim", "AdamW")
    fixable = "never"

    what_it_does = """
    Reports the learning rate of an optimizer when the script multiplies its per-process batch
    implicitly, by running data-parallel (DDP, FSDP, `init_process_group`, `accelerate`) or by
    accumulating gradients, and the LR is a plain literal, constant or argparse default that no
    expression in the file relates to batch size, world size or accumulation steps. Scripts that
    derive the per-process batch from a global one (`batch_size // world_size`,
    `Accelerator(split_batches=True)`), that compute the LR from the batch
    (`lr = base_lr * batch / 256`, `traindoctor.recipes.scale_lr`) or that edit `group["lr"]`
    are not reported, and neither is a single-process script that merely exposes `--batch-size`
    and `--lr`: there the user sets both. A script that declares the total batch and derives the
    accumulation from it (`grad_accum = total_batch_size // (batch_size * world_size)`,
    `accumulation = batch_size // micro_batch_size` on one device) sets its LR for that declared
    batch and is not reported either. Scaling in an opt-in branch that is off by default
    (`if args.scale_lr:` with `action="store_true"`) is no scaling: the default run uses the LR
    unchanged. An optimizer built by a helper of the file or of another project module from what
    the call passes (`create_optimizer(args, model)` reading `args.lr`) is judged at the call.
    """
    why_bad = """
    The batch the optimizer averages over is `batch x accumulation x world_size`. Moving a recipe
    from one GPU to eight multiplies it by eight; with the LR unchanged each sample's gradient
    counts eight times less, training takes more epochs to converge and usually ends worse.
    Goyal et al. (2017) showed that for SGD the LR should grow linearly with the batch (with a
    gradual warmup); for Adam-family optimizers square-root scaling is the better rule of thumb
    (Malladi et al. 2022). Either way the LR has to be stated *for* the effective batch.
    """
    example = """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("nccl")
    model = DDP(Net().cuda())
    loader = torch.utils.data.DataLoader(train_set, batch_size=64, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # tuned for 1 GPU
    """
    use_instead = """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from traindoctor.recipes import effective_batch, scale_lr

    dist.init_process_group("nccl")
    model = DDP(Net().cuda())
    loader = torch.utils.data.DataLoader(train_set, batch_size=64, sampler=sampler)
    batch = effective_batch(64)  # 64 x world size, read from torch.distributed
    lr = scale_lr(0.1, base_batch=64, batch=batch, optimizer=torch.optim.SGD)  # linear for SGD
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    """
    options = """
    The runtime needs a declared reference: `reference_batch` and `reference_lr` (thresholds,
    e.g. `watch(thresholds={"reference_batch": 256, "reference_lr": 0.1})`, or the CLI's
    reference options); without them it stays silent. The effective batch is the median number
    of samples the DataLoader delivered per optimizer step times the world size (else the layers'
    per-forward batch times the backward() calls per step). The LR counts as unchanged when the
    primary optimizer's peak LR is within `TD203.lr_tolerance` (default 0.01, relative) of the
    reference. The recommended LR uses linear scaling for SGD-like optimizers and square-root
    scaling for Adam-family ones.
    """
    references = (
        "https://arxiv.org/abs/1706.02677",
        "https://arxiv.org/abs/2205.10287",
        "https://arxiv.org/abs/1404.5997",
    )

    valid = (
        Valid("""
        import argparse
        import torch

        # single process, no accumulation: the user sets both knobs
        parser = argparse.ArgumentParser()
        parser.add_argument("--batch-size", type=int, default=256)
        parser.add_argument("--lr", type=float, default=0.1)
        args = parser.parse_args()
        loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size)
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
        for x, y in loader:
            criterion(model(x), y).backward()
        """),
        Valid("""
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("nccl")
        world_size = dist.get_world_size()
        model = DDP(Net().cuda())
        loader = torch.utils.data.DataLoader(train_set, batch_size=64, sampler=sampler)
        lr = 0.1 * 64 * world_size / 256
        optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        for x, y in loader:
            criterion(model(x), y).backward()
        """),
        Valid("""
        import torch
        import torch.distributed as dist

        # ImageNet-example style: the global batch is split across GPUs
        def main_worker(gpu, ngpus_per_node, args):
            dist.init_process_group("nccl", rank=gpu, world_size=ngpus_per_node)
            args.batch_size = int(args.batch_size / ngpus_per_node)
            model = torch.nn.parallel.DistributedDataParallel(Net().cuda(gpu), device_ids=[gpu])
            optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9)
        for x, y in loader:
            criterion(model(x), y).backward()
        """),
        Valid("""
        import torch

        accum_steps = 1  # no accumulation
        for i, (x, y) in enumerate(loader):
            (criterion(model(x), y) / accum_steps).backward()
            if (i + 1) % accum_steps == 0:
                optimizer.step()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        for x, y in loader:
            criterion(model(x), y).backward()
        """),
        Valid("""
        import torch

        # the user declares the total batch; the accumulation follows from it
        learning_rate = 3e-4
        batch_size = 128
        micro_batch_size = 4
        gradient_accumulation_iters = batch_size // micro_batch_size
        optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
        for i, (x, y) in enumerate(loader):
            (criterion(model(x), y) / gradient_accumulation_iters).backward()
            if (i + 1) % gradient_accumulation_iters == 0:
                optimizer.step()
                optimizer.zero_grad()
        """),
        Valid("""
        import torch
        from accelerate import Accelerator

        accelerator = Accelerator()
        optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr)  # LR from a config: unknown
        for x, y in loader:
            criterion(model(x), y).backward()
        """),
    )
    invalid = (
        Invalid("""
        import argparse
        import torch
        from accelerate import Accelerator

        parser = argparse.ArgumentParser()
        parser.add_argument("--learning_rate", type=float, default=1e-4)
        parser.add_argument("--scale_lr", action="store_true")  # off unless asked for
        args = parser.parse_args()
        accelerator = Accelerator(gradient_accumulation_steps=4)
        if args.scale_lr:
            args.learning_rate = args.learning_rate * 4 * accelerator.num_processes
        optimizer = torch.optim.AdamW(unet.parameters(), lr=args.learning_rate)  # TD203
        unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
        for batch in loader:
            with accelerator.accumulate(unet):
                accelerator.backward(unet(batch).loss)
                optimizer.step()
        """),
        Invalid("""
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        dist.init_process_group("nccl")
        model = DDP(Net().cuda())
        loader = torch.utils.data.DataLoader(train_set, batch_size=64, sampler=sampler)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # TD203
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x.cuda()), y.cuda()).backward()
            optimizer.step()
        """),
        Invalid("""
        import argparse
        import torch.optim as optim

        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=3e-4)
        parser.add_argument("--accumulation-steps", type=int, default=8)
        args = parser.parse_args()
        optimizer = optim.AdamW(model.parameters(), args.lr)  # TD203
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y) / args.accumulation_steps
            loss.backward()
            if (i + 1) % args.accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        """),
        Invalid("""
        from accelerate import Accelerator
        from torch.optim import AdamW as Opt

        LR = 5e-5
        opt_kwargs = {"lr": LR, "weight_decay": 0.0}
        accelerator = Accelerator(gradient_accumulation_steps=4)
        optimizer = Opt(model.parameters(), **opt_kwargs)  # TD203
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for batch in loader:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss)
                optimizer.step()
                optimizer.zero_grad()
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.batching.static import (
            accumulation,
            accumulation_from_total,
            data_parallel_names,
            distributed,
            lr_related_to_batch,
            optimizer_is_data_parallel,
            per_node_split,
            plain_lr,
            splits_global_batch,
            trains,
        )
        from traindoctor.facts.optim.static import optimizer_calls

        if not trains(ctx) and not _drives_project_training(ctx):  # library files stop here
            return
        dist = distributed(ctx)
        acc = accumulation(ctx)
        if dist is None and acc is None:
            return
        if splits_global_batch(ctx) or lr_related_to_batch(ctx):
            return
        if acc is not None and accumulation_from_total(ctx, dist is not None) is not None:
            return  # the user declares the total batch and the accumulation follows from it
        per_node = per_node_split(ctx)
        if dist is not None and per_node is not None:
            grows = (
                f"the batch is divided among one node's GPUs only (line {ctx.location(per_node).row}), so the "
                "global batch grows with the number of nodes"
            )
        elif dist is not None:
            grows = "the per-process batch is multiplied by the world size"
            if acc is not None:
                grows += " and by gradient accumulation"
        else:
            grows = "gradient accumulation multiplies the batch"
            if acc is not None and isinstance(acc.factor, int):
                grows += f" by {acc.factor}"
        parallel = data_parallel_names(ctx) if dist is not None else set()
        built: list[tuple[ast.Call, object, bool]] = []
        for opt in optimizer_calls(ctx):
            built.append((opt.call, opt.arg(ctx, "lr"), optimizer_is_data_parallel(ctx, opt.call, parallel)))
        for call in ctx.calls_to(*sorted(_TIMM_FROM_ARGS)):
            if len(call.args) >= 2 and isinstance(call.args[0], ast.Name):
                # timm's ``create_optimizer(args, model)`` builds the optimizer with ``args.lr``
                steps_parallel = any(isinstance(n, ast.Name) and n.id in parallel for n in ast.walk(call.args[1]))
                built.append((call, _option_read(ctx, call.args[0].id, "lr", call), steps_parallel))
        helpers = {id(call): related for call, _, related in _helper_built(ctx)}
        for call, helper_lr, _ in _helper_built(ctx):
            arguments = [*call.args, *(k.value for k in call.keywords)]
            steps = any(isinstance(n, ast.Name) and n.id in parallel for a in arguments for n in ast.walk(a))
            built.append((call, helper_lr, steps))
        built.sort(key=lambda b: (b[0].lineno, b[0].col_offset))
        reported: set[int] = set()
        for call, lr, steps_parallel in built:
            if dist is not None and not steps_parallel and acc is None:
                continue
            if not isinstance(lr, ast.expr) or id(call) in reported or not plain_lr(ctx, lr):
                continue
            reported.add(id(call))
            helper = id(call) in helpers
            yield ctx.report(
                self,
                call if helper or not ctx.within(lr, call) else lr,
                f"The LR `{(dotted(lr) if helper else None) or ctx.segment(lr)}` is used unchanged although "
                f"{grows}; scale it with the effective batch (linear for SGD, square root for Adam-family; "
                "e.g. `traindoctor.recipes.scale_lr`) and warm it up.",
                help="Scale the learning rate with the effective batch",
                related=helpers.get(id(call), ()),
            )


def _helper_built(ctx: FileContext) -> list[tuple[ast.Call, ast.expr, tuple[Related, ...]]]:
    """(call, the caller's LR expression, related) for each call of a function of this file or
    of another project module that builds an optimizer whose LR is what the call passes
    (``create_optimizer(args, model)`` reading ``args.lr``)."""
    return ctx.shared("td203.helper_built", _find_helper_built)


def _find_helper_built(ctx: FileContext) -> list[tuple[ast.Call, ast.expr, tuple[Related, ...]]]:
    from traindoctor.facts.optim.callsite import expression_at, helper_optimizers, related_in_callee

    out: list[tuple[ast.Call, ast.expr, tuple[Related, ...]]] = []
    done: set[int] = set()
    for site, opt in helper_optimizers(ctx):
        if id(site.call) in done:
            continue  # the first optimizer of the helper that takes its LR from the call
        lr = expression_at(site, opt.arg(site.callee, "lr"))
        if lr is None:
            continue
        done.add(id(site.call))
        out.append((site.call, lr, related_in_callee(site, opt.call, f"`{opt.name}` is built here with that LR")))
    return out


def _drives_project_training(ctx: FileContext) -> bool:
    """An epoch loop around a project function that runs backward or is handed the file's
    optimizer (``train_one_epoch(model, criterion, loader, optimizer, ...)`` of ``engine.py``):
    the file trains through it."""
    from traindoctor.facts.data.static import drives_training, is_test_file

    view = ctx.project
    if is_test_file(ctx.filename) or view is None or not drives_training(ctx) or not view.imports_project:
        return False
    from traindoctor.facts.optim.static import optimizer_calls

    optimizers = set()
    helpers = [c for c, _, _ in _helper_built(ctx)]
    for call in [*(o.call for o in optimizer_calls(ctx)), *ctx.calls_to(*sorted(_TIMM_FROM_ARGS)), *helpers]:
        stmt = ctx.statement_of(call)
        if isinstance(stmt, ast.Assign):
            optimizers |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    for call, resolved in view.calls():
        if resolved.function is None:
            continue
        if resolved.function.backward:
            return True
        arguments = [*call.args, *(k.value for k in call.keywords)]
        if any(isinstance(a, ast.Name) and a.id in optimizers for a in arguments):
            return True
    return False


#: timm's factories that build an optimizer from an argparse namespace (``opt``, ``lr``, ``weight_decay``).
_TIMM_FROM_ARGS = frozenset({"timm.optim.create_optimizer", "timm.optim.optim_factory.create_optimizer"})


def _option_read(ctx: FileContext, namespace: str, option: str, call: ast.Call) -> ast.Attribute | None:
    """A read of ``namespace.option`` in the function of ``call`` (the value look-ups need a node
    of the file); None when the function reads none."""
    fn = ctx.function_of(call)
    for found in ctx.of(ast.Attribute):
        node = cast(ast.Attribute, found)
        if (
            node.attr == option
            and isinstance(node.value, ast.Name)
            and node.value.id == namespace
            and isinstance(node.ctx, ast.Load)
            and ctx.function_of(node) is fn
        ):
            return node
    return None


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.facts.batching.lr_monitor import LrStepMonitor  # noqa: E402


class LrNotScaledMonitor(LrStepMonitor):
    """The effective batch differs from a declared reference while the LR is the reference LR.

    Needs the reference: thresholds ``reference_batch`` and ``reference_lr`` (``watch(thresholds=
    {"reference_batch": 256, "reference_lr": 0.1})`` or the CLI's ``--reference-batch`` /
    ``--reference-lr``). Without them the monitor is silent.
    """

    rule = LrNotScaled

    def on_run_end(self) -> None:
        try:
            ref_batch = float(self.threshold("reference_batch", 0) or 0)
            ref_lr = float(self.threshold("reference_lr", 0) or 0)
        except (TypeError, ValueError):
            return
        peak = self.lrs.peak_lr()
        if ref_batch <= 0 or ref_lr <= 0 or not peak:
            return
        from traindoctor.facts.batching.runtime import effective_batch

        eff = effective_batch(self.session, self.steps)
        if eff is None or eff.total == ref_batch:
            return
        tolerance = float(self.threshold("lr_tolerance", 0.01))
        if abs(peak / ref_lr - 1.0) > tolerance:
            return  # the LR was changed: assume the user scaled it
        rule, lr = _recommended(ref_lr, ref_batch, eff.total, self.lrs.optimizer_name)
        self.report(
            f"The effective batch is {eff.total} (reference {int(ref_batch)}) but the learning "
            f"rate is still the reference {ref_lr:g}; scale it ({rule} rule: {lr:.3g}, "
            "`traindoctor.recipes.scale_lr`) and warm it up.",
            evidence={
                **eff.evidence(),
                "reference_batch": int(ref_batch),
                "reference_lr": ref_lr,
                "peak_lr": peak,
                "optimizer": self.lrs.optimizer_name,
                "scaling_rule": rule,
                "recommended_lr": lr,
            },
            step=self.session.step,
        )


def _recommended(ref_lr: float, ref_batch: float, batch: int, optimizer: str) -> tuple[str, float]:
    """(rule, LR) as `traindoctor.recipes.scale_lr`: square root for Adam-family, else linear."""
    import math

    if _is_sqrt(optimizer):
        return "sqrt", ref_lr * math.sqrt(batch / ref_batch)
    return "linear", ref_lr * batch / ref_batch


def _is_sqrt(optimizer: str) -> bool:
    name = optimizer.lower()
    return any(k in name for k in ("adam", "lamb", "rmsprop", "adagrad", "adadelta", "adafactor"))
