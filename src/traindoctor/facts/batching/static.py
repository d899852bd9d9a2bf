"""Batch-size facts of a training script: per-forward batch, gradient accumulation, data parallelism, LR.

TD202 (BatchNorm over a small batch), TD203 (LR not scaled with the effective batch) and TD206
(large batch without warmup) all reason about ``effective batch = batch x accumulation x
world_size``. This module finds each factor the way the file spells it:

* the per-forward batch: ``batch_size`` of a *training* DataLoader (loaders named like
  val/test/eval are skipped), as a literal, constant or argparse default;
* gradient accumulation: ``Accelerator(gradient_accumulation_steps=k)``, Lightning's
  ``accumulate_grad_batches``, a loss divided by an ``accum``-named value, or
  ``optimizer.step()`` under ``if (i + 1) % k == 0``;
* data parallelism: DDP/FSDP wrapping, ``init_process_group``, ``accelerate.Accelerator``;
* whether the script already relates the LR or the batch to those factors (then rules stay silent).
"""

from __future__ import annotations

import ast
import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traindoctor.facts.data.static import is_evaluation_name, is_test_file, iter_training_loaders
from traindoctor.facts.frameworks.static import is_lightning_class
from traindoctor.static.args import UNKNOWN
from traindoctor.static.branches import not_taken_by_default
from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


def eval_named(text: str) -> bool:
    """``val_loader``, ``testset``, ``self.eval_dl``: text whose words say evaluation."""
    return is_evaluation_name(text)


@dataclass(frozen=True)
class LoaderBatch:
    """A training DataLoader and its per-forward batch size (``value`` may be UNKNOWN)."""

    loader: ast.Call
    node: ast.expr
    value: Any

    def anchor(self, ctx: FileContext) -> ast.AST:
        """Where to report: the argument when it is written in the call, else the call."""
        return self.node if ctx.within(self.node, self.loader) else self.loader


def training_batches(ctx: FileContext) -> list[LoaderBatch]:
    """Training loaders (see :mod:`traindoctor.facts.data.static`) that pass ``batch_size``, in source order.

    Test files have none: batch-size advice about test code is noise.
    """
    out = []
    for loader in iter_training_loaders(ctx):
        node = loader.arg(ctx, "batch_size")
        if not isinstance(node, ast.expr):  # MISSING or UNKNOWN
            continue
        out.append(LoaderBatch(loader.call, node, ctx.value(node)))
    return out


def trains(ctx: FileContext) -> bool:
    """The file runs backward passes (a training script, not inference) and is not test code."""
    if is_test_file(ctx.filename):
        return False
    if ctx.method_calls("backward") or ctx.method_calls("manual_backward"):
        return True
    # Lightning's automatic optimization: the Trainer runs backward on what training_step returns.
    return any(fn.name == "training_step" and is_lightning_class(ctx, ctx.parent(fn)) for fn in ctx.of(ast.FunctionDef))


# ---------------------------------------------------------------- accumulation
@dataclass(frozen=True)
class Accumulation:
    """Evidence of gradient accumulation; ``factor`` is an int > 1 or UNKNOWN."""

    node: ast.stmt | ast.expr
    factor: Any


def _accum_named(node: ast.AST) -> bool:
    text = (dotted(node) or "").lower()
    return "accum" in text or "grad_acc" in text or "accumulat" in text


def _factor(ctx: FileContext, node: ast.AST) -> Any:
    v = ctx.value(node)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return UNKNOWN
    return v


def accumulation(ctx: FileContext) -> Accumulation | None:
    """The first evidence of gradient accumulation (a known factor of 1 is not accumulation)."""
    found: list[Accumulation] = []
    for qn, kw in (
        ("accelerate.Accelerator", "gradient_accumulation_steps"),
        ("lightning.Trainer", "accumulate_grad_batches"),
        ("lightning.pytorch.Trainer", "accumulate_grad_batches"),
        ("pytorch_lightning.Trainer", "accumulate_grad_batches"),
    ):
        for call in ctx.calls_to(qn):
            node = ctx.arg(call, kw)
            if isinstance(node, ast.expr):  # not MISSING or UNKNOWN
                found.append(Accumulation(node, _factor(ctx, node)))
    for node in ctx.of(ast.BinOp):
        if isinstance(node.op, (ast.Div, ast.FloorDiv)) and _accum_named(node.right):
            left = dotted(node.left) or ""
            if "loss" in left.lower() or isinstance(node.left, ast.Call):
                found.append(Accumulation(node, _factor(ctx, node.right)))
    for node in ctx.of(ast.AugAssign):
        if isinstance(node.op, ast.Div) and _accum_named(node.value) and "loss" in (dotted(node.target) or "").lower():
            found.append(Accumulation(node, _factor(ctx, node.value)))
    for node in ctx.of(ast.If):
        divisor = modulo_divisor(node.test)
        if divisor is None or (isinstance(divisor, ast.Constant) and divisor.value == 1):
            continue
        if any(is_optimizer_step(ctx, s) for s in node.body) and ctx.enclosing_loops(node):
            found.append(Accumulation(node, _factor(ctx, divisor)))
    found = [a for a in found if a.factor is UNKNOWN or a.factor > 1]
    found.sort(key=lambda a: (a.node.lineno, a.node.col_offset))
    return found[0] if found else None


def is_optimizer_step(ctx: FileContext, stmt: ast.stmt) -> bool:
    """``optimizer.step()`` / ``scaler.step(optimizer)`` as a statement."""
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    func = stmt.value.func
    if not (isinstance(func, ast.Attribute) and func.attr == "step"):
        return False
    text = ((dotted(func.value) or "") + " " + " ".join(ctx.segment(a) for a in stmt.value.args)).lower()
    return "opt" in text or "scaler" in text


def modulo_divisor(test: ast.expr) -> ast.expr | None:
    """``(i + 1) % k == 0`` -> ``k``."""
    if isinstance(test, ast.BoolOp):
        for v in test.values:
            d = modulo_divisor(v)
            if d is not None:
                return d
        return None
    if (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.left, ast.BinOp)
        and isinstance(test.left.op, ast.Mod)
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == 0
    ):
        return test.left.right
    return None


# ---------------------------------------------------------------- data parallelism
_DISTRIBUTED = (
    "torch.nn.parallel.DistributedDataParallel",
    "torch.distributed.init_process_group",
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_shard",
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "accelerate.Accelerator",
    "horovod.torch.init",
)


def distributed(ctx: FileContext) -> ast.Call | None:
    """The first call that makes this script data-parallel over several processes, if any."""
    calls = ctx.calls_to(*_DISTRIBUTED)
    for call in calls:
        if ctx.qualname(call.func) == "accelerate.Accelerator" and ctx.value(ctx.arg(call, "split_batches")) is True:
            continue
        return call
    return None


def _per_node_divisor(ctx: FileContext, node: ast.AST) -> bool:
    """``ngpus_per_node`` / ``local_world_size`` / ``torch.cuda.device_count()``: GPUs of one node."""
    for sub in ast.walk(node):
        if isinstance(sub, (ast.Name, ast.Attribute)):
            text = (sub.id if isinstance(sub, ast.Name) else sub.attr).lower()
            if "per_node" in text or text.startswith("local_world") or text == "nproc_per_node":
                return True
        if isinstance(sub, ast.Call) and (ctx.qualname(sub.func) or "").endswith(".device_count"):
            return True
    return False


def per_node_split(ctx: FileContext) -> ast.Assign | ast.AugAssign | None:
    """The ImageNet-example shape: ``batch_size = batch_size / ngpus_per_node`` while
    ``world_size = ngpus_per_node * world_size`` (nodes): the batch is total *per node*, so on
    several nodes the global batch grows with the node count. The assignment, or None."""
    if "world_size" not in ctx.lowered_source:
        return None  # no target can spell it (a target's text is part of the file's)
    multiplies_nodes = False
    for node in ctx.of(ast.Assign):
        if any("world_size" in ctx.segment(t).lower() for t in node.targets) and any(
            isinstance(n, ast.BinOp) and isinstance(n.op, ast.Mult) and _per_node_divisor(ctx, n)
            for n in ast.walk(node.value)
        ):
            multiplies_nodes = True
            break
    if not multiplies_nodes:
        return None
    stmt: ast.Assign | ast.AugAssign
    for stmt in ctx.of(ast.Assign, ast.AugAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if not any("batch" in ctx.segment(t).lower() for t in targets):
            continue
        if isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, (ast.Div, ast.FloorDiv)):
            divisors = [stmt.value]
        else:
            divisors = [
                n.right
                for n in ast.walk(stmt.value)
                if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv))
            ]
        if divisors and all(_per_node_divisor(ctx, d) for d in divisors):
            return stmt
    return None


def splits_global_batch(ctx: FileContext) -> bool:
    """The per-process batch is derived by dividing a global batch (``batch // world_size``).

    Then the effective batch stays what the user asked for and nothing grows implicitly.
    """
    per_node = per_node_split(ctx)
    lines = ctx.lines
    for node in ctx.of(ast.Assign, ast.AnnAssign, ast.AugAssign):
        # A target's text is part of its statement's lines: most statements name no batch and are
        # passed over without cutting out their targets' text.
        if "batch" not in "".join(lines[node.lineno - 1 : node.end_lineno or node.lineno]).lower():
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if not any("batch" in ctx.segment(t).lower() for t in targets):
            continue
        if node is per_node:
            continue  # divided among this node's GPUs only: the global batch grows with the nodes
        if isinstance(node, ast.AugAssign) and isinstance(node.op, (ast.Div, ast.FloorDiv)):
            return True
        if node.value is not None and any(
            isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv)) for n in ast.walk(node.value)
        ):
            return True
    for lb in training_batches(ctx):
        if any(isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv)) for n in ast.walk(lb.node)):
            return True
    for call in ctx.calls_to("accelerate.Accelerator"):
        if ctx.value(ctx.arg(call, "split_batches")) is True:
            return True
    return False


def accumulation_from_total(ctx: FileContext, distributed: bool) -> ast.AST | None:
    """The statement that derives the accumulation count from a batch the user declares
    (``grad_accum = total_batch_size // (batch_size * world_size)``,
    ``accumulation_iters = batch_size // micro_batch_size``), else None.

    Then the effective batch is that declared total, not a product that grows implicitly: the LR
    is set for it. Under data parallelism the derivation must divide by the world size too
    (otherwise the total still grows with the number of processes)."""
    node: ast.Assign | ast.AnnAssign
    for node in ctx.of(ast.Assign, ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if node.value is None or not any(_accum_named(t) for t in targets):
            continue
        divisions = [
            n for n in ast.walk(node.value) if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv))
        ]
        if not any(any("batch" in i.lower() for i in _identifiers(d.left)) for d in divisions):
            continue
        if distributed and not any(_world_named(i) for i in _identifiers(node.value)):
            continue
        if not_taken_by_default(ctx, node):
            continue
        return node
    return None


def _world_named(name: str) -> bool:
    n = name.lower()
    return any(w in n for w in ("world", "num_processes", "nprocs", "num_replicas", "gpus", "n_gpu", "ngpu", "devices"))


# ---------------------------------------------------------------- learning rate
_SCALE_WORDS = (
    "batch",
    "world",
    "accum",
    "num_processes",
    "ngpu",
    "n_gpu",
    "num_gpu",
    "gpus",
    "nprocs",
    "num_replicas",
    "nodes",
    "devices",
)


def lr_named(name: str) -> bool:
    n = name.lower()
    return n == "lr" or n.endswith("_lr") or n.startswith("lr_") or "learning_rate" in n


#: Words of names that hold a schedule or its length, not a learning rate (``lr_scheduler``,
#: ``lr_warmup_steps``): scaling those with the accumulation is no scaling of the LR.
_SCHEDULE_WORDS = ("sched", "step", "warmup", "epoch", "milestone")


def _lr_value_named(name: str) -> bool:
    return lr_named(name) and not any(w in name.lower() for w in _SCHEDULE_WORDS)


def _scale_named(name: str) -> bool:
    n = name.lower()
    return any(w in n for w in _SCALE_WORDS)


def _identifiers(node: ast.AST) -> list[str]:
    out = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.append(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.append(sub.attr)
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            out.append(sub.value)
        elif isinstance(sub, ast.keyword) and sub.arg:
            out.append(sub.arg)
    return out


def lr_related_to_batch(ctx: FileContext) -> bool:
    """Some statement relates the LR to batch size, world size or accumulation (or edits it later).

    ``lr = base_lr * batch_size / 256``, ``args.lr *= world_size``, ``scale_lr(...)``,
    ``group["lr"] = ...``: any of these means the author thought about it; rules stay silent.
    """
    if any(q.endswith("scale_lr") for q in ctx.called_names):
        return True
    lines = ctx.lines
    for node in ctx.of(ast.Assign, ast.AnnAssign, ast.AugAssign):
        # Every identifier of a statement is spelled in its lines: most statements name no LR
        # and are passed over without walking their trees (a 5,000-line module has thousands).
        text = "".join(lines[node.lineno - 1 : node.end_lineno or node.lineno]).lower()
        if "lr" not in text and "learning_rate" not in text:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        target_ids = [i for t in targets for i in _identifiers(t)]
        if any(isinstance(t, ast.Subscript) and any(lr_named(i) for i in _identifiers(t.slice)) for t in targets):
            # ``group["lr"] = lr``: an edit; it relates the LR to the batch when the value does
            # (``lr = args.lr * cos(...)`` in a schedule function is no scaling)
            if (node.value is None or _scaled_value(ctx, node.value)) and not not_taken_by_default(ctx, node):
                return True
            continue
        ids = target_ids + (_identifiers(node.value) if node.value is not None else [])
        if any(_lr_value_named(i) for i in ids) and any(_scale_named(i) for i in ids):
            if not not_taken_by_default(ctx, node):  # ``if args.scale_lr:`` (off by default) is no scaling
                return True
    for call in ctx.of(ast.Call):
        for kw in call.keywords:
            if kw.arg and _lr_value_named(kw.arg) and any(_scale_named(i) for i in _identifiers(kw.value)):
                if not not_taken_by_default(ctx, call):
                    return True
    for call in ctx.method_calls("add_argument"):
        action = next((k.value for k in call.keywords if k.arg == "action"), None)
        if action is not None and not (isinstance(action, ast.Constant) and action.value in ("store", None)):
            continue  # a switch (``--scale_lr``, ``store_true``): what it does is in the code it guards
        if any(
            lr_named(a.value.lstrip("-").replace("-", "_"))
            for a in call.args
            if isinstance(a, ast.Constant) and isinstance(a.value, str)
        ):
            help_text = " ".join(ctx.segment(k.value) for k in call.keywords if k.arg == "help").lower()
            if any(w in help_text for w in ("scaled", "per 256", "batch size", "world size")):
                return True
    return False


def _scaled_value(ctx: FileContext, value: ast.AST) -> bool:
    """Whether a value, or a local name it reads (one hop), mentions batch/world/accumulation."""
    ids = _identifiers(value)
    if any(_scale_named(i) for i in ids):
        return True
    fn = ctx.function_of(value)
    for name in (n for n in ast.walk(value) if isinstance(n, ast.Name)):
        for bound in ctx.bindings_of(name) or ():
            if bound is None:
                continue
            if ctx.function_of(bound) is fn and any(_scale_named(i) for i in _identifiers(bound)):
                return True
    for aug in ctx.of(ast.AugAssign):
        if isinstance(aug.target, ast.Name) and aug.target.id in ids and ctx.function_of(aug) is fn:
            if any(_scale_named(i) for i in _identifiers(aug.value)):
                return True
    return False


def plain_lr(ctx: FileContext, node: ast.AST | None, _depth: int = 0, _options: frozenset[str] = frozenset()) -> bool:
    """An LR passed unchanged: a literal, or a name/argparse option that leads to one (through
    the file's reassignments of the option: ``if args.lr is None: args.lr = args.blr``)."""
    if _depth > 6:
        return False
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        bound = ctx.bindings_of(node)
        if not bound or any(b is None for b in bound):
            return False
        return all(plain_lr(ctx, b, _depth + 1, _options) for b in bound)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        text = f"{node.value.id}.{node.attr}"
        values = _option_assignments(ctx, text)
        if values is None:
            return False
        v = ctx.argparse_default(node, declared=bool(values) or _assigned_opt_in(ctx, text))
        plain = isinstance(v, (int, float)) and not isinstance(v, bool)
        if text in _options:
            return plain or v is None  # the option's own value, read again
        if not values:
            return plain
        # the option as set on the command line (or its default), and each value assigned to it
        return (plain or v is None) and all(plain_lr(ctx, b, _depth + 1, _options | {text}) for b in values)
    return False


def _assigned_opt_in(ctx: FileContext, text: str) -> bool:
    """Whether the file assigns ``args.lr`` only in branches the defaults do not take."""
    return any(
        dotted(t) == text and not_taken_by_default(ctx, stmt) for stmt in ctx.of(ast.Assign) for t in stmt.targets
    )


def _option_assignments(ctx: FileContext, text: str) -> list[ast.expr] | None:
    """The values the file assigns to ``args.lr`` (dotted ``text``); None when it changes it
    otherwise (``args.lr *= 2``, ``setattr``). An assignment in a branch the defaults do not take
    (``if args.scale_lr:``) is not the value a default run uses."""
    out: list[ast.expr] = []
    for stmt in ctx.of(ast.Assign, ast.AugAssign, ast.AnnAssign):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for target in targets:
            if dotted(target) != text or not_taken_by_default(ctx, stmt):
                continue
            if not isinstance(stmt, ast.Assign) or stmt.value is None:
                return None
            out.append(stmt.value)
    return out


# ---------------------------------------------------------------- warmup
_WARMUP_SCHEDULERS = (
    "torch.optim.lr_scheduler.LinearLR",
    "torch.optim.lr_scheduler.OneCycleLR",
    "torch.optim.lr_scheduler.SequentialLR",
    "torch.optim.lr_scheduler.CyclicLR",
    "torch.optim.lr_scheduler.ChainedScheduler",
)


def has_warmup(ctx: FileContext) -> bool:
    """The file ramps the LR up somewhere (or may: anything named warmup counts)."""
    if ctx.calls_to(*_WARMUP_SCHEDULERS):
        return True
    # Any node will do, so the index is read as it is (not sorted into source order).
    kinds = (ast.Name, ast.Attribute, ast.keyword, ast.FunctionDef, ast.Constant, ast.arg)
    for node in itertools.chain.from_iterable(ctx.nodes.get(kind, ()) for kind in kinds):
        text = (
            getattr(node, "id", None)
            or getattr(node, "attr", None)
            or getattr(node, "arg", None)
            or getattr(node, "name", None)
            or getattr(node, "value", None)
        )
        if isinstance(text, str) and ("warmup" in text.lower() or "warm_up" in text.lower()):
            return True
    for call in ctx.calls_to("torch.optim.lr_scheduler.LambdaLR", "torch.optim.lr_scheduler.MultiplicativeLR"):
        for sub in ast.walk(call):
            if isinstance(sub, ast.Lambda) and any(
                isinstance(n, (ast.Compare, ast.IfExp))
                or (isinstance(n, ast.Call) and dotted(n.func) in ("min", "max"))
                for n in ast.walk(sub.body)
            ):
                return True
    return False


_WRAP = (
    "torch.nn.parallel.DistributedDataParallel",
    "torch.distributed.fsdp.FullyShardedDataParallel",
    "torch.distributed.fsdp.fully_shard",
)


def data_parallel_names(ctx: FileContext) -> set[str]:
    """Names of objects that run data-parallel: wrapped by DDP/FSDP (either side of the
    assignment) or handed to ``accelerator.prepare(...)``."""
    out: set[str] = set()
    for call in ctx.calls_to(*_WRAP):
        if call.args and isinstance(call.args[0], ast.Name):
            out.add(call.args[0].id)
        stmt = ctx.statement_of(call)
        if isinstance(stmt, ast.Assign):
            out |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    accelerators = {c for c in ctx.calls_to("accelerate.Accelerator")}
    if accelerators:
        for call in ctx.method_calls("prepare"):
            out |= {a.id for a in call.args if isinstance(a, ast.Name)}
            stmt = ctx.statement_of(call)
            if isinstance(stmt, ast.Assign):
                for t in stmt.targets:
                    out |= {e.id for e in ast.walk(t) if isinstance(e, ast.Name)}
    if out:  # ``model_without_ddp = model.module``: the wrapped model's own parameters
        for stmt in ctx.of(ast.Assign):
            value = stmt.value
            if (
                isinstance(value, ast.Attribute)
                and value.attr == "module"
                and isinstance(value.value, ast.Name)
                and value.value.id in out
            ):
                out |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    return out


def optimizer_is_data_parallel(ctx: FileContext, call: ast.Call, names: set[str]) -> bool:
    """The optimizer steps a data-parallel model: it is prepared itself, or its params come from one."""
    stmt = ctx.statement_of(call)
    if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id in names for t in stmt.targets):
        return True
    params = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "params"), None)
    if params is None:
        return False
    if any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(params)):
        return True
    # ``param_groups = param_groups_weight_decay(model_without_ddp, wd)``: one binding back
    for n in ast.walk(params):
        if isinstance(n, ast.Name):
            for value in ctx.bindings_of(n) or ():
                if value is not None and any(isinstance(m, ast.Name) and m.id in names for m in ast.walk(value)):
                    return True
    return False
