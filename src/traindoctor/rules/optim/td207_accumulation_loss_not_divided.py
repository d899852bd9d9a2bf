"""TD207 accumulation-loss-not-divided: gradients accumulated over micro-batches from an undivided loss."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.runtime.events import Monitor

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: Calls through which the accumulation count may reach the loss's computation unseen.
_HARMLESS_CALLS = frozenset(("range", "print", "len", "int", "float", "str", "enumerate", "format", "max", "min"))


class AccumulationLossNotDivided(Rule):
    code = "TD207"
    name = "accumulation-loss-not-divided"
    severity = Severity.ERROR
    summary = (
        "Gradients are accumulated over several backward calls per optimizer step from a loss that is "
        "not divided by the accumulation count: the update is that many times too large."
    )
    static = True
    runtime = True
    triggers = ("backward",)
    fixable = "never"

    what_it_does = """
    Reports `loss.backward()` that runs on every iteration of a loop whose optimizer step is
    under an accumulation condition (`if (i + 1) % k == 0: optimizer.step()`), when nothing in
    the file divides or scales by `k`: not the loss (`loss / k`, `loss /= k`, `loss * (1 / k)`),
    not the learning rate, and `k` is not handed to another function that could. Backward calls
    through a framework (`accelerator.backward(loss)`, DeepSpeed's `engine.backward(loss)`,
    Lightning) are not reported: the framework divides. Test files are skipped.

    At run time the rule reads the root of each backward's graph (the loss tensor's `grad_fn`) on
    sampled steps: it reports when the optimizer steps after more than one backward call and
    none of those losses was divided or scaled (no division or multiplication at the root, a
    GradScaler's own scaling aside).
    """
    why_bad = """
    `backward()` adds each micro-batch's gradient to `.grad`. With a mean-reduced loss, `k`
    accumulated micro-batches sum to `k` times the gradient of one batch of `k x batch` samples,
    so the optimizer takes a step `k` times larger than intended (for SGD this is the same as
    multiplying the learning rate by `k`; Adam is roughly invariant to the scale but gradient
    clipping and weight decay are not). Dividing each micro-batch's loss by `k` makes the
    accumulated gradient the mean over the large batch, which is what the accumulation was meant
    to emulate.
    """
    example = """
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y)
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    use_instead = """
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accum_steps
        loss.backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    references = (
        "https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation",
        "https://huggingface.co/docs/accelerate/usage_guides/gradient_accumulation",
    )

    valid = (
        Valid("""
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            (loss / accum_steps).backward()
            if (i + 1) % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        """),
        Valid("""
        for step, batch in enumerate(loader):
            loss = model(**batch).loss
            loss = loss / args.gradient_accumulation_steps
            scaler.scale(loss).backward()
            if step % args.gradient_accumulation_steps == 0:
                scaler.step(optimizer)
                scaler.update()
        """),
        Valid("""
        # the learning rate is scaled down instead
        optimizer = torch.optim.SGD(model.parameters(), lr=base_lr / accum)
        for i, (x, y) in enumerate(loader):
            criterion(model(x), y).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
        """),
        Valid("""
        for i, batch in enumerate(loader):
            with accelerator.accumulate(model):
                loss = model(batch)
                accelerator.backward(loss)
                if (i + 1) % 4 == 0:
                    optimizer.step()
        """),
    )
    invalid = (
        Invalid("""
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y)
            loss.backward()  # TD207
            if (i + 1) % accum_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
        """),
        Invalid("""
        def train(model, opt, loader, scaler, cfg):
            for it, batch in enumerate(loader):
                out = model(batch["x"])
                scaler.scale(criterion(out, batch["y"])).backward()  # TD207
                if it % cfg.grad_accum == 0 and it > 0:
                    scaler.step(opt)
                    scaler.update()
                    opt.zero_grad()
        """),
        Invalid("""
        step = 0
        for batch in loader:
            outputs = model(**batch)
            outputs.loss.backward()  # TD207
            step += 1
            if step % 8 == 0:
                optimizer.step()
                optimizer.zero_grad()
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import is_test_file

        if is_test_file(ctx.filename):
            return
        for backward, divisor in _undivided(ctx):
            k = ast.unparse(divisor)
            yield ctx.report(
                self,
                backward,
                f"The loss is backpropagated on every micro-batch while the optimizer steps every "
                f"`{k}`, and it is not divided by `{k}`: the accumulated gradient is `{k}` times too "
                f"large; divide the loss by `{k}`.",
                help=f"Divide the loss by `{k}`",
            )


def _loss_of(call: ast.Call) -> ast.expr | None:
    """The loss of ``<loss>.backward()`` (through ``scaler.scale(loss)``); None for
    ``framework.backward(loss)`` and backward calls with arguments."""
    if call.args or not isinstance(call.func, ast.Attribute):
        return None
    target = call.func.value
    if (
        isinstance(target, ast.Call)
        and isinstance(target.func, ast.Attribute)
        and target.func.attr == "scale"
        and len(target.args) == 1
    ):
        return target.args[0]
    return target


def _key(divisor: ast.expr) -> str:
    """The name the accumulation count goes by (``args.grad_accum`` -> ``grad_accum``)."""
    if isinstance(divisor, ast.Attribute):
        return divisor.attr
    if isinstance(divisor, ast.Name):
        return divisor.id
    return ast.unparse(divisor)


def _mentions(node: ast.AST, key: str) -> bool:
    return any(
        (isinstance(n, ast.Name) and n.id == key)
        or (isinstance(n, ast.Attribute) and n.attr == key)
        or (isinstance(n, ast.Constant) and repr(n.value) == key)
        for n in ast.walk(node)
    )


def _scaled_anywhere(ctx: FileContext, key: str) -> bool:
    """The file divides or multiplies by the count, or passes it to a function that may."""
    for node in ctx.of(ast.BinOp):
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mult)) and (
            _mentions(node.left, key) or _mentions(node.right, key)
        ):
            return True
    for node in ctx.of(ast.AugAssign):
        if isinstance(node.op, (ast.Div, ast.Mult)) and _mentions(node.value, key):
            return True
    for call in ctx.of(ast.Call):
        name = call.func.id if isinstance(call.func, ast.Name) else getattr(call.func, "attr", "")
        if name in _HARMLESS_CALLS or name.startswith(("log", "info", "debug", "warn", "add_argument")):
            continue
        args = [*call.args, *(kw.value for kw in call.keywords)]
        if any(_mentions(a, key) and not isinstance(a, ast.JoinedStr) for a in args):
            return True
    return False


def _loss_scaled(ctx: FileContext, loss: ast.expr) -> bool:
    """The loss expression, or a value bound to its name, is a division or product."""
    if isinstance(loss, ast.BinOp):
        return True
    if isinstance(loss, ast.Name):
        bound = ctx.bindings_of(loss)
        if bound is None:
            return True  # unknown: stay silent
        return any(b is None or isinstance(b, ast.BinOp) for b in bound)
    return False


def _undivided(ctx: FileContext) -> Iterator[tuple[ast.Call, ast.expr]]:
    from traindoctor.facts.training.static import accumulation_divisor, enclosing_loops

    for call in ctx.method_calls("backward"):
        loss = _loss_of(call)
        if loss is None:
            continue
        loops = enclosing_loops(ctx, call)
        if not loops:
            continue
        divisor = accumulation_divisor(ctx, loops[0], call)
        if divisor is None or _loss_scaled(ctx, loss) or _scaled_anywhere(ctx, _key(divisor)):
            continue
        yield call, divisor


# ---------------------------------------------------------------- runtime half
#: Steps whose backward roots are read: 1-6, then every 50th.
def _sampled(step: int) -> bool:
    return step <= 6 or step % 50 == 0


class AccumulationLossNotDividedMonitor(Monitor):
    """Steps with several backward calls whose losses were all unscaled at the graph's root."""

    rule = AccumulationLossNotDivided

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self._roots: list[list[str]] = []
        self._scaler = False
        self.sampled = 0
        self.undivided = 0
        self.root = ""
        self.accumulation = 0

    def on_scaler_created(self, scaler: Any, site: Any = None) -> None:
        self._scaler = True

    def on_loss_backward(self, loss: Any) -> None:
        if not _sampled(self.session.step + 1) or len(self._roots) >= 64:
            return
        from traindoctor.facts.training.runtime import root_nodes

        self._roots.append(root_nodes(loss))

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        roots, self._roots = self._roots, []
        calls = self.session.backward_calls_this_step
        if calls < 2 or len(roots) != calls:
            return  # no accumulation, or backward calls not seen through Tensor.backward
        from traindoctor.facts.training.runtime import SCALING

        self.sampled += 1
        unscaled = []
        for chain in roots:
            if self._scaler and len(chain) > 1 and chain[0] in SCALING:
                chain = chain[1:]  # scaler.scale(loss)
            unscaled.append(bool(chain) and not any(n in SCALING for n in chain))
        if all(unscaled):
            self.undivided += 1
            self.root = roots[0][-1] if roots[0] else ""
            self.accumulation = max(self.accumulation, calls)

    def on_run_end(self) -> None:
        if self.sampled < 2 or self.undivided < self.sampled:
            return
        k = self.accumulation
        self.report(
            f"The optimizer stepped after {k} backward calls on every sampled step and none of the "
            f"losses was divided: the accumulated gradient is about {k} times too large; divide the "
            f"loss by {k}.",
            evidence={
                "backward_per_step": k,
                "sampled_steps": self.sampled,
                "undivided_steps": self.undivided,
                "loss_root": self.root,
            },
            step=self.session.step,
        )
