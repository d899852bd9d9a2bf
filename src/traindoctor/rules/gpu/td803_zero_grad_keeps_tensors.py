"""TD803 zero-grad-keeps-tensors: ``zero_grad(set_to_none=False)`` zero-fills every gradient each step."""

from __future__ import annotations

import ast
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: Source words of CUDA graphs, which need gradients that stay where they are between replays.
_GRAPH_WORDS = ("cuda.graph", "CUDAGraph", "make_graphed_callables", "capturable")


def _set_to_none(call: ast.Call) -> ast.expr | None:
    """The ``set_to_none`` argument of ``x.zero_grad(...)`` (keyword or first positional)."""
    for kw in call.keywords:
        if kw.arg == "set_to_none":
            return kw.value
    return call.args[0] if call.args else None


def _updates_grads_in_place(ctx: FileContext) -> bool:
    """``p.grad += g``, ``p.grad /= n``, ``p.grad.add_(g)``: the file adds into gradient tensors
    outside backward (a parameter server, manual accumulation), which needs them to exist."""
    for node in ctx.of(ast.AugAssign):
        target = node.target
        if isinstance(target, ast.Attribute) and target.attr == "grad":
            return True
    for node in ctx.of(ast.Call):
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr.endswith("_")
            and func.attr != "zero_"
            and isinstance(func.value, ast.Attribute)
            and func.value.attr in ("grad", "data")
        ):
            inner = func.value
            if inner.attr == "grad" or (isinstance(inner.value, ast.Attribute) and inner.value.attr == "grad"):
                return True
    return False


class ZeroGradKeepsTensors(Rule):
    code = "TD803"
    name = "zero-grad-keeps-tensors"
    severity = Severity.INFO
    summary = (
        "`zero_grad(set_to_none=False)` zero-fills every gradient at every step instead of releasing "
        "it; call `zero_grad()` (PyTorch's default since 2.0 sets the gradients to None)."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("set_to_none", "zero_grad")
    fixable = "sometimes"

    what_it_does = """
    Reports `optimizer.zero_grad(set_to_none=False)` and `model.zero_grad(False)` (the argument by
    keyword or by position, a literal or a constant of the file). Test files, files that use
    CUDA graphs (`torch.cuda.graph`, `make_graphed_callables`, `capturable=True`: a captured graph
    needs its gradient tensors to stay where they are) and files that add into gradients outside
    backward (`p.grad += g`, `p.grad /= n`, `p.grad.add_(g)`: a parameter server, manual
    accumulation) are left alone.

    At run time: on sampled optimizer steps (the first four, then every 100th) one parameter of
    the optimizer is watched until the next backward reaches it; it fires when, on every sampled
    step, the parameter still held its gradient tensor and that tensor had been written in place
    since the step (zero-filled), read from the tensor's version counter, without a device sync.
    """
    why_bad = """
    `zero_grad(set_to_none=False)` writes zeros over every gradient tensor at every step: one
    extra pass over memory the size of the model's parameters, and the next backward then adds
    into the zeros instead of writing its result directly. `set_to_none=True` (the default since
    PyTorch 2.0) only drops the references; the allocator reuses the memory and backward writes
    the fresh gradients. The few cases that need zero tensors (reading `.grad` before the next
    backward, CUDA graphs) are better served by handling `None` or by capturing explicitly.
    """
    example = """
    for x, y in loader:
        optimizer.zero_grad(set_to_none=False)
        criterion(model(x), y).backward()
        optimizer.step()
    """
    use_instead = """
    for x, y in loader:
        optimizer.zero_grad()
        criterion(model(x), y).backward()
        optimizer.step()
    """
    fix_safety = """
    Unsafe: code that reads or updates `p.grad` between `zero_grad()` and the next backward (a
    manual `p.grad.add_(...)`, a hook that expects a tensor) then meets `None`.
    """
    options = """
    At run time it fires after at least two sampled steps, all of them zero-filled.
    """
    references = (
        "https://pytorch.org/docs/stable/generated/torch.optim.Optimizer.zero_grad.html",
        "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#use-parameter-grad-none-instead-of-model-zero-grad-or-optimizer-zero-grad",
    )

    valid = (
        Valid("""
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
        """),
        Valid("""
        optimizer.zero_grad(set_to_none=True)
        model.zero_grad(True)
        """),
        Valid("""
        # CUDA graphs need the gradient tensors to stay in place between replays
        import torch

        optimizer = torch.optim.Adam(model.parameters(), capturable=True)
        g = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=False)
        """),
        Valid("""
        # a parameter server adds the workers' gradients into the tensors
        for p, g in zip(model.parameters(), grads):
            p.grad += g
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        """),
        Valid("""
        # the value is not known
        optimizer.zero_grad(set_to_none=args.keep_grads)
        """),
    )
    invalid = (
        Invalid(
            """
            for x, y in loader:
                optimizer.zero_grad(set_to_none=False)  # TD803
                criterion(model(x), y).backward()
                optimizer.step()
            """,
            unsafe_fixed="""
            for x, y in loader:
                optimizer.zero_grad(set_to_none=True)  # TD803
                criterion(model(x), y).backward()
                optimizer.step()
            """,
        ),
        Invalid(
            """
            KEEP = False
            model.zero_grad(KEEP)  # TD803
            """,
            unsafe_fixed="""
            KEEP = False
            model.zero_grad(True)  # TD803
            """,
        ),
        Invalid(
            """
            class Trainer:
                def step(self, batch):
                    self.opt.zero_grad(set_to_none=False)  # TD803
                    self.loss(batch).backward()
                    self.opt.step()
            """,
            unsafe_fixed="""
            class Trainer:
                def step(self, batch):
                    self.opt.zero_grad(set_to_none=True)  # TD803
                    self.loss(batch).backward()
                    self.opt.step()
            """,
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import is_test_file

        if is_test_file(ctx.filename) or any(w in ctx.source for w in _GRAPH_WORDS):
            return
        if _updates_grads_in_place(ctx):
            return
        for call in ctx.method_calls("zero_grad"):
            arg = _set_to_none(call)
            if arg is None or ctx.value(arg) is not False:
                continue
            yield ctx.report(
                self,
                call,
                f"`{ctx.segment(call)}` zero-fills every gradient at every step instead of releasing it; "
                "call `zero_grad()` (set_to_none=True, PyTorch's default since 2.0).",
                fix=ctx.fix_replace(arg, "True", "Pass `set_to_none=True`", applicability="unsafe"),
                help="Pass `set_to_none=True`",
            )


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402

#: Optimizer steps after which the next backward is watched: 1-4, then every 100th.
_SAMPLED_FIRST = 4
_SAMPLED_EVERY = 100


class _Watch:
    """One parameter between an optimizer step and the next backward that reaches it."""

    __slots__ = ("grad", "handle", "param", "seen", "version")

    def __init__(self, param: Any) -> None:
        self.param = weakref.ref(param)
        self.grad = weakref.ref(param.grad)
        self.version = int(param.grad._version)
        self.handle: Any = None
        #: None until the backward reached the parameter; then whether it met a zero-filled tensor.
        self.seen: bool | None = None


class ZeroGradKeepsTensorsMonitor(Monitor):
    """Gradient tensors kept and written in place between an optimizer step and the next backward."""

    rule = ZeroGradKeepsTensors

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self._steps: dict[int, int] = {}
        self._watches: dict[int, _Watch] = {}
        self.sampled = 0
        self.kept = 0
        self.grad_bytes = 0

    def _close(self, key: int) -> None:
        watch = self._watches.pop(key, None)
        if watch is None:
            return
        if watch.handle is not None:
            watch.handle.remove()
        if watch.seen is not None:
            self.sampled += 1
            self.kept += int(watch.seen)

    def on_after_optimizer_step(self, optimizer: Any) -> None:
        key = id(optimizer)
        self._close(key)
        count = self._steps.get(key, 0) + 1
        self._steps[key] = count
        if count > _SAMPLED_FIRST and count % _SAMPLED_EVERY:
            return
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if not params:
            return
        self.grad_bytes = max(self.grad_bytes, sum(int(p.grad.numel()) * int(p.grad.element_size()) for p in params))
        watch = _Watch(params[0])

        def before_accumulation(grad: Any, _watch: _Watch = watch) -> None:
            if _watch.seen is None:
                p = _watch.param()
                current: Any = None if p is None else p.grad
                # the same tensor, written in place since the step: zero-filled (no device sync)
                kept = current is not None and current is _watch.grad()
                _watch.seen = kept and int(current._version) > _watch.version
            return None

        watch.handle = params[0].register_hook(before_accumulation)
        self._watches[key] = watch

    def on_run_end(self) -> None:
        for key in list(self._watches):
            self._close(key)
        if self.sampled < 2 or self.kept < self.sampled:
            return
        self.report(
            f"Gradients were zero-filled in place instead of released on all {self.sampled} sampled "
            f"steps ({self.grad_bytes / 2**20:.1f} MiB of gradients written each step); call "
            "`zero_grad()` with its default `set_to_none=True`.",
            evidence={
                "sampled_steps": self.sampled,
                "zero_filled_steps": self.kept,
                "grad_mib": round(self.grad_bytes / 2**20, 3),
            },
            step=self.session.step or None,
            help="Call `zero_grad()` (set_to_none=True)",
        )
