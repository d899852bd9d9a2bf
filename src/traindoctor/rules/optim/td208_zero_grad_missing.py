"""TD208 zero-grad-missing: the training loop never clears gradients between optimizer steps."""

from __future__ import annotations

import ast
import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.runtime.events import Monitor

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: Spellings of clearing gradients; a file that contains any of them is left alone.
CLEARS = (
    "zero_grad",
    "set_to_none",
    "grad = None",
    "grad=None",
    "grad.zero_",
    "grad.data.zero_",
    "grad.fill_",
    "grad.data.fill_",
    "grad.detach_",
    "grad.data.mul_",
    "grad.mul_",
    "clear_grad",
    "zero_gradients",
)


class ZeroGradMissing(Rule):
    code = "TD208"
    name = "zero-grad-missing"
    severity = Severity.ERROR
    summary = (
        "The training loop never clears gradients, so every optimizer step adds the previous steps' "
        "gradients; call `optimizer.zero_grad()` once per step."
    )
    static = True
    runtime = True
    triggers = ("step",)
    fixable = "never"

    what_it_does = """
    Reports `optimizer.step()` inside a loop that also runs `backward()`, where `optimizer` is a
    `torch.optim` optimizer built in the same file (outside that loop: a fresh optimizer per
    iteration is a one-step check, not training), and the file never clears gradients in any
    spelling (`zero_grad`, `set_to_none`, `p.grad = None`, `p.grad.zero_()`, ...). Test files are
    skipped.

    At run time the rule samples one parameter per optimizer: right after a step it copies that
    parameter's gradient, and a gradient hook on the parameter reads `.grad` just before the next
    backward adds to it. It reports when, on every sampled step that ran a single backward, the
    gradient was still the previous step's (never set to `None` or zero).
    """
    why_bad = """
    `backward()` adds to `.grad`; it never overwrites it. Without a clear between steps, the
    gradient used at step `n` is the sum of the gradients of all steps so far, so the updates grow
    and point in stale directions: training diverges or converges to something else than
    intended. Deliberate gradient accumulation is several `backward()` calls per step *with* a
    clear after the step; without one, every step accumulates from the start of training.
    """
    example = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    """
    use_instead = """
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        loss = criterion(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """
    references = (
        "https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html",
        "https://pytorch.org/tutorials/recipes/recipes/zeroing_out_gradients.html",
    )

    valid = (
        Valid("""
        import torch

        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            criterion(model(x), y).backward()
            optimizer.step()
        """),
        Valid("""
        import torch

        opt = torch.optim.Adam(params)
        for batch in loader:
            loss_fn(batch).backward()
            opt.step()
            for p in params:
                p.grad = None
        """),
        Valid("""
        import torch

        # a fresh optimizer every iteration: a one-step numeric check, not a training loop
        for trial in range(3):
            model(x).sum().backward()
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            opt.step()
        """),
        Valid("""
        # a framework's engine clears gradients in its own step
        for batch in loader:
            loss = engine(batch)
            engine.backward(loss)
            engine.step()
        """),
    )
    invalid = (
        Invalid("""
        import torch

        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()  # TD208
        """),
        Invalid("""
        from torch import optim

        def train(model, loader, scaler):
            opt = optim.AdamW(model.parameters(), lr=3e-4)
            for step, batch in enumerate(loader):
                scaler.scale(model(batch)).backward()
                scaler.step(opt)  # TD208
                scaler.update()
        """),
        Invalid("""
        import torch

        optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
        epoch = 0
        while epoch < 10:
            for x in loader:
                net(x).pow(2).mean().backward()
                optimizer.step()  # TD208
            epoch += 1
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import is_test_file

        if is_test_file(ctx.filename) or any(word in ctx.source for word in CLEARS):
            return
        for step, name in _unclearing_steps(ctx):
            yield ctx.report(
                self,
                step,
                f"The loop steps `{name}` but never clears gradients, so each step adds all previous "
                f"steps' gradients: call `{name}.zero_grad()` once per step.",
                help="Clear the gradients once per optimizer step",
            )


def _is_optimizer(ctx: FileContext, expr: ast.expr) -> bool:
    """A name bound only to ``torch.optim.<Optimizer>(...)`` calls."""
    if not isinstance(expr, ast.Name):
        return False
    bound = ctx.bindings_of(expr)
    if not bound:
        return False
    for value in bound:
        qn = ctx.qualname(value.func) if isinstance(value, ast.Call) else None
        if not qn or not qn.startswith("torch.optim.") or "lr_scheduler" in qn or "swa_utils" in qn:
            return False
    return True


def _unclearing_steps(ctx: FileContext) -> Iterator[tuple[ast.Call, str]]:
    from traindoctor.facts.training.static import training_loop_of

    for call in ctx.method_calls("step"):
        func = call.func
        assert isinstance(func, ast.Attribute)
        if _is_optimizer(ctx, func.value):
            target = func.value
        elif call.args and _is_optimizer(ctx, call.args[0]) and "scaler" in (ast.unparse(func.value)).lower():
            target = call.args[0]  # ``scaler.step(optimizer)``
        else:
            continue
        loop = training_loop_of(ctx, call)
        if loop is None:
            continue
        assert isinstance(target, ast.Name)
        if any(value is not None and ctx.within(value, loop) for value in ctx.bindings_of(target) or ()):
            continue  # a fresh optimizer per iteration (a numeric check, not a training loop)
        yield call, target.id


# ---------------------------------------------------------------- runtime half
def _sampled(step: int) -> bool:
    """Optimizer steps after which the next interval is watched: 1-4, then every 100th."""
    return 1 <= step <= 4 or step % 100 == 0


class _Watch:
    """One optimizer's sampled parameter between two of its steps."""

    __slots__ = ("cleared", "fired", "first_equal", "handle", "param", "snapshot")

    def __init__(self, param: Any, snapshot: Any) -> None:
        self.param = weakref.ref(param)
        self.snapshot = snapshot
        self.fired = 0
        self.cleared = False
        self.first_equal = False
        self.handle: Any = None


class ZeroGradMissingMonitor(Monitor):
    """Gradients carried from one optimizer step into the next (see the rule's docs)."""

    rule = ZeroGradMissing

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self._steps: dict[int, int] = {}
        self._watches: dict[int, _Watch] = {}
        self.sampled = 0
        self.carried = 0

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        watch = self._watches.pop(id(optimizer), None)
        if watch is None:
            return
        if watch.handle is not None:
            watch.handle.remove()
        if watch.fired == 0 or self.session.backward_calls_this_step != 1:
            return  # no backward reached the parameter, or deliberate accumulation
        self.sampled += 1
        if not watch.cleared and watch.first_equal:
            self.carried += 1

    def on_after_optimizer_step(self, optimizer: Any) -> None:
        key = id(optimizer)
        count = self._steps.get(key, 0) + 1
        self._steps[key] = count
        if not _sampled(count):
            return
        param = _smallest_with_grad(optimizer)
        if param is None:
            return
        watch = _Watch(param, param.grad.detach().clone())

        def before_accumulation(grad: Any, _watch: _Watch = watch) -> None:
            p = _watch.param()
            _watch.fired += 1
            current = None if p is None else p.grad
            if current is None or not bool(current.any()):
                _watch.cleared = True
            elif _watch.fired == 1:
                _watch.first_equal = bool(current.shape == _watch.snapshot.shape) and bool(
                    (current == _watch.snapshot).all()
                )
            return None

        watch.handle = param.register_hook(before_accumulation)
        self._watches[key] = watch

    def on_run_end(self) -> None:
        for watch in self._watches.values():
            if watch.handle is not None:
                watch.handle.remove()
        self._watches.clear()
        if self.sampled < 2 or self.carried < self.sampled:
            return
        self.report(
            f"Gradients were carried from one optimizer step into the next on all {self.sampled} "
            "sampled steps (one backward each): call `optimizer.zero_grad()` once per step.",
            evidence={"sampled_steps": self.sampled, "carried_steps": self.carried, "backward_per_step": 1},
            step=self.session.step,
        )


def _smallest_with_grad(optimizer: Any) -> Any:
    """The parameter of ``optimizer`` with the fewest elements among those holding a nonzero gradient."""
    best = None
    for group in optimizer.param_groups:
        for p in group["params"]:
            grad = getattr(p, "grad", None)
            if grad is None or grad.is_sparse or not p.requires_grad:
                continue
            if best is None or p.numel() < best.numel():
                best = p
    if best is None or not bool(best.grad.any()):
        return None
    return best
