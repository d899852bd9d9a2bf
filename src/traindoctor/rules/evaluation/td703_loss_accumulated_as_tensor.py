"""TD703 loss-accumulated-as-tensor: a running total keeps every step's autograd graph alive."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


def _accumulations(ctx: FileContext) -> Iterable[tuple[ast.stmt, ast.expr, ast.expr]]:
    """(statement, accumulator target, added value) for ``t += v`` and ``t = t + v``."""
    for node in ctx.of(ast.AugAssign):
        if isinstance(node.op, ast.Add):
            yield node, node.target, node.value
    for node in ctx.of(ast.Assign):
        value = node.value
        if (
            len(node.targets) == 1
            and isinstance(value, ast.BinOp)
            and isinstance(value.op, ast.Add)
            and dotted(node.targets[0]) is not None
            and dotted(value.left) == dotted(node.targets[0])
        ):
            yield node, node.targets[0], value.right


def _loss_operand(value: ast.expr) -> ast.Name | None:
    """The loss name in ``loss``, ``loss * x.size(0)`` or ``loss / n``."""
    if isinstance(value, ast.Name):
        return value
    if isinstance(value, ast.BinOp) and isinstance(value.op, (ast.Mult, ast.Div)):
        for side in (value.left, value.right):
            if isinstance(side, ast.Name):
                return side
    return None


class LossAccumulatedAsTensor(Rule):
    code = "TD703"
    name = "loss-accumulated-as-tensor"
    severity = Severity.WARNING
    summary = (
        "A running total adds the loss tensor itself, keeping every step's autograd graph alive; "
        "add `loss.detach()` (or `loss.item()`) instead."
    )
    gpu_only = False
    static = True
    runtime = False
    triggers = ("backward",)
    fixable = "sometimes"

    what_it_does = """
    Reports `total += loss` and `total = total + loss` (also `loss * x.size(0)`) in a loop when
    `loss` holds a loss that is still attached to the autograd graph: it is backpropagated in the
    same function (`loss.backward()`, `scaler.scale(loss).backward()`,
    `accelerator.backward(loss)`), or it was just computed by a criterion / loss function in a
    function that runs backward passes. Accumulators that are themselves backpropagated (summing
    several losses on purpose) and code under `no_grad` are not reported, nor is a loss last
    assigned from `.item()` or `.detach()`. The sum may live in another class, often in another
    module: `losses.update(loss, n)` on an object whose `update` adds its argument into an
    attribute (`self.sum += val * n`, an average meter) is reported at the call, citing the sum.
    """
    why_bad = """
    A loss tensor carries a reference to the graph that produced it. Adding it to a running
    total makes the total part of that graph, so the activations saved for backward are kept for
    every step until the total is dropped, usually at the end of the epoch: memory grows step by
    step until it runs out, and logging the total costs a device synchronisation anyway.
    `loss.detach()` keeps a tensor without the graph (no sync until the total is read);
    `loss.item()` returns a Python float but waits for the device at every step (TD801).
    """
    example = """
    running_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        running_loss += loss
    """
    use_instead = """
    running_loss = 0.0
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        running_loss += loss.detach()
    print(running_loss.item() / len(loader))
    """
    fix_safety = """
    The fix rewrites the added loss to `loss.detach()` and is marked unsafe: a total that started
    as a number becomes a tensor on the loss's device, so code that wants a Python number from it
    (`json.dump`, a logger that rejects tensors) has to read `total.item()` once, at the end.
    `loss.item()` instead would wait for the device at every step (TD801).
    """
    references = (
        "https://pytorch.org/docs/stable/notes/faq.html#my-model-reports-cuda-runtime-error-2-out-of-memory",
        "https://pytorch.org/docs/stable/generated/torch.Tensor.item.html",
    )

    valid = (
        Valid("""
        running_loss = 0.0
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            running_loss += loss.item()
        """),
        Valid("""
        # several losses summed on purpose, then backpropagated together
        for x, y in loader:
            total = 0
            for head in heads:
                loss = criterion(head(model(x)), y)
                total += loss
            total.backward()
        """),
        Valid("""
        import torch

        val_loss = 0.0
        with torch.no_grad():
            for x, y in val_loader:
                loss = criterion(model(x), y)
                val_loss += loss
        """),
        Valid("""
        epoch_loss = 0.0
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            loss = loss.detach()
            epoch_loss += loss
        """),
    )
    invalid = (
        Invalid(
            """
            running_loss = 0.0
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                running_loss += loss  # TD703
            """,
            unsafe_fixed="""
            running_loss = 0.0
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                running_loss += loss.detach()  # TD703
            """,
        ),
        Invalid(
            """
            import torch.nn.functional as F

            def train_epoch(model, loader, opt, scaler):
                total = 0
                for x, y in loader:
                    out = F.cross_entropy(model(x), y)
                    scaler.scale(out).backward()
                    scaler.step(opt)
                    total = total + out * x.size(0)  # TD703
                return total / len(loader.dataset)
            """,
            unsafe_fixed="""
            import torch.nn.functional as F

            def train_epoch(model, loader, opt, scaler):
                total = 0
                for x, y in loader:
                    out = F.cross_entropy(model(x), y)
                    scaler.scale(out).backward()
                    scaler.step(opt)
                    total = total + out.detach() * x.size(0)  # TD703
                return total / len(loader.dataset)
            """,
        ),
        Invalid("""
        class Trainer:
            def fit(self):
                self.epoch_loss = 0.0
                for batch in self.loader:
                    loss = self.loss_fn(self.model(batch["x"]), batch["y"])
                    self.accelerator.backward(loss)
                    self.opt.step()
                    self.epoch_loss += loss  # TD703
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.evaluation.static import attached_loss, backward_receivers, grad_enabled_at

        if not (ctx.method_calls("backward") or ctx.method_calls("manual_backward")):
            return
        for stmt, target, value in _accumulations(ctx):
            name = _loss_operand(value)
            if name is None or not ctx.enclosing_loops(stmt):
                continue
            if grad_enabled_at(ctx, stmt) is False:
                continue
            fn = ctx.function_of(stmt)
            receivers = backward_receivers(ctx, fn)
            accumulator = (dotted(target) or "").split(".")[-1]
            if accumulator in receivers or (dotted(target) or "") in receivers:
                continue
            if not attached_loss(ctx, name.id, stmt, fn):
                continue
            yield ctx.report(
                self,
                stmt,
                f"`{ctx.segment(target)}` accumulates the loss tensor `{name.id}` with its autograd graph; "
                f"add `{name.id}.detach()` (or `{name.id}.item()`) instead.",
                fix=ctx.fix_replace(name, f"{name.id}.detach()", f"Use `{name.id}.detach()`", applicability="unsafe"),
                help=f"Accumulate `{name.id}.detach()`",
            )
        yield from self._meters(ctx)

    def _meters(self, ctx: FileContext) -> Iterable[Finding]:
        """``losses.update(loss, n)`` where the meter's ``update`` sums its argument into an
        attribute (``self.sum += val * n``), in this file or another project module."""
        from traindoctor.facts.evaluation.static import attached_loss, grad_enabled_at
        from traindoctor.facts.training.meters import accumulated_argument
        from traindoctor.finding import Related
        from traindoctor.static.project import place_of

        for call in ctx.of(ast.Call):
            func = call.func
            if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
                continue
            names = [a for a in call.args if isinstance(a, ast.Name)]
            if not names or not ctx.enclosing_loops(call):
                continue
            stmt = ctx.statement_of(call)
            if grad_enabled_at(ctx, stmt) is False:
                continue
            fn = ctx.function_of(stmt)
            for name in names:
                found = accumulated_argument(ctx, call, name)
                if found is None or not attached_loss(ctx, name.id, stmt, fn):
                    continue
                module, where = found
                message = f"`{func.attr}` sums it here"
                if module is ctx:
                    related: tuple[Related, ...] = (Related(ctx.filename, ctx.location(where), message),)
                else:
                    related = ctx.project.related(place_of(module, where), message)
                yield ctx.report(
                    self,
                    stmt,
                    f"`{ctx.segment(func)}` sums the loss tensor `{name.id}` into its object with its autograd "
                    f"graph; pass `{name.id}.item()` (or `{name.id}.detach()`) instead.",
                    fix=ctx.fix_replace(
                        name, f"{name.id}.detach()", f"Use `{name.id}.detach()`", applicability="unsafe"
                    ),
                    help=f"Pass `{name.id}.detach()`",
                    related=related,
                )
                break
