"""TD702 eval-with-grad: evaluation forward passes that still record autograd graphs."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.names import dotted, receiver
from traindoctor.static.vocab import EVAL_LOOP_TRIGGERS

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn

    from traindoctor.runtime.live import Site
    from traindoctor.runtime.records import ForwardInfo
    from traindoctor.static.context import FileContext


class EvalWithGrad(Rule):
    code = "TD702"
    name = "eval-with-grad"
    severity = Severity.WARNING
    summary = (
        "Evaluation forward passes run with autograd recording; wrap them in "
        "`torch.inference_mode()` or `torch.no_grad()`."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = (".eval(", "train(", *EVAL_LOOP_TRIGGERS)
    fixable = "never"

    what_it_does = """
    Reports calls of a model after `model.eval()` (or `.train(False)`) in the same function when
    no backward pass follows in that function (`.backward()`, `torch.autograd.grad`) and autograd
    is still on: the call is not inside `with torch.no_grad()` / `torch.inference_mode()` /
    `torch.set_grad_enabled(False)`, the function is not decorated with one of them, and no
    call site of the function in the file disables grad. Files that switch autograd off globally
    or freeze parameters (`requires_grad_(False)`) are left alone, and so are JAX/Flax or
    TensorFlow programs that import nothing from torch (they have no autograd recording to turn
    off). A function under a project's own decorator that runs it inside `no_grad` (`@nograd`
    where `def nograd(f)` wraps `f` in `with torch.no_grad():`) has autograd off, and a model
    whose own `forward` turns autograd off (a `no_grad` block for its inference branch) is left
    alone: what a call records then depends on its arguments.

    Inference scripts are evaluation code too: a script that loads a trained model and runs it
    with autograd recording wastes the same memory and time.

    An evaluation loop that has neither `model.eval()` nor `no_grad` is reported too (and by
    TD701 when the model has BatchNorm or Dropout): a `for` loop, comprehension or generator
    expression over a loader named like val/valid/test/eval, with no backward pass or optimizer
    step in it or after it in the function, running a model that is in training mode on
    evidence (see TD701). A loss module called in such a loop (`bce = nn.BCEWithLogitsLoss()`)
    is no model.
    """
    why_bad = """
    `model.eval()` changes how BatchNorm and Dropout behave; it does not stop autograd. Every
    forward pass still saves the activations needed for a backward pass that never comes: memory
    use grows with the batch (often several times the inference footprint, which caps the
    evaluation batch size or runs out of memory), and time is spent building graphs.
    `torch.inference_mode()` also skips version-counter bookkeeping and is the fastest choice
    when the outputs are not used in autograd later.
    """
    example = """
    model.eval()
    for x, y in val_loader:
        correct += (model(x).argmax(1) == y).sum().item()
    """
    use_instead = """
    model.eval()
    with torch.inference_mode():
        for x, y in val_loader:
            correct += (model(x).argmax(1) == y).sum().item()
    """
    options = """
    `TD702.min_forwards` (default 2): eval-mode forwards that recorded an autograd graph (some
    input or parameter requires grad) that no backward() used before the layer ran in training
    mode again or the run ended.
    """
    references = (
        "https://pytorch.org/docs/stable/notes/autograd.html#locally-disable-grad-doc",
        "https://pytorch.org/docs/stable/generated/torch.autograd.grad_mode.inference_mode.html",
    )

    valid = (
        Valid("""
        import torch
        from torch import nn

        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 2)

            def forward(self, x):
                return self.fc(x)

        # the model module's smoke test: one forward to print a shape, no training in the file
        if __name__ == "__main__":
            model = Net()
            model.eval()
            out = model(torch.randn(1, 8))
            print(out.shape)
        """),
        Valid("""
        import torch
        from torch import nn

        model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))
        for epoch in range(20):
            for x, y in train_loader:
                nn.functional.cross_entropy(model(x), y).backward()
            with torch.no_grad():
                correct = sum((model(x).argmax(1) == y).sum().item() for x, y in val_loader)
        """),
        Valid("""
        import torch

        model = build_model()
        model.requires_grad_(False)
        # frozen parameters: the forward records no graph
        preds = [model(x) for x in test_loader]
        """),
        Valid("""
        import torch

        def evaluate(model, loader):
            model.eval()
            with torch.no_grad():
                return [model(x) for x, _ in loader]
        """),
        Valid("""
        import torch

        @torch.inference_mode()
        def predict(model, batch):
            model.eval()
            return model(batch).softmax(-1)
        """),
        Valid("""
        import torch

        # adversarial example: gradients w.r.t. the input are wanted in eval mode
        def fgsm(model, x, y, eps):
            model.eval()
            x.requires_grad_(True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            return x + eps * x.grad.sign()
        """),
        Valid("""
        import torch

        def validate(model, loader):
            model.eval()
            return [model(x) for x, _ in loader]

        with torch.no_grad():
            scores = validate(model, val_loader)
        """),
        Valid("""
        import torch

        # frozen BatchNorm statistics during fine-tuning: forwards feed a backward pass
        model.eval()
        for x, y in loader:
            criterion(model(x), y).backward()
            optimizer.step()
        """),
        Valid("""
        import torch
        from torch import nn

        def nograd(f):
            def wrapper(*args, **kwargs):
                with torch.no_grad():
                    return f(*args, **kwargs)
            return wrapper

        class Detector(nn.Module):
            def __init__(self):
                super().__init__()
                self.head = nn.Linear(8, 4)

            def forward(self, x):
                return self.head(x)

            @nograd  # the project's own decorator runs predict() under no_grad
            def predict(self, images):
                self.eval()
                return [self(x) for x in images]
        """),
    )
    invalid = (
        Invalid("""
        import torch
        from torch import nn

        model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(20):
            for x, y in train_loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            correct = 0
            for x, y in val_loader:
                correct += (model(x).argmax(1) == y).sum().item()  # TD702
        """),
        Invalid("""
        import torch

        def evaluate(model, loader):
            model.eval()
            correct = 0
            for x, y in loader:
                correct += (model(x).argmax(1) == y).sum().item()  # TD702
            return correct
        """),
        Invalid("""
        import torch

        for epoch in range(10):
            net.train()
            for x, y in train_loader:
                loss = criterion(net(x), y)
                loss.backward()
            net.train(False)
            val_loss = sum(criterion(net(x), y).item() for x, y in val_loader)  # TD702
        """),
        Invalid("""
        import torch.nn as nn

        class Trainer:
            def validate(self):
                self.model.eval()
                outs = []
                for batch in self.val_loader:
                    outs.append(self.model(batch).cpu())  # TD702
                self.model.train()
                return outs
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.evaluation.callee import forward_disables_grad
        from traindoctor.facts.evaluation.flow import unguarded_evaluation_forwards
        from traindoctor.facts.evaluation.static import freezes_parameters, grad_disabled_globally

        if grad_disabled_globally(ctx) or freezes_parameters(ctx):
            return
        for call, model in unguarded_evaluation_forwards(ctx):
            if forward_disables_grad(ctx, call.func):
                continue
            yield ctx.report(
                self,
                call,
                f"`{model}` is evaluated with autograd recording (neither `no_grad` nor `eval()`) "
                "and no backward pass; wrap the loop in `torch.inference_mode()` (or "
                f"`torch.no_grad()`) and call `{model}.eval()` first.",
                help="Wrap evaluation in `torch.inference_mode()`",
            )
        yield from self._check_eval_mode(ctx)

    def _check_eval_mode(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.evaluation.callee import forward_disables_grad
        from traindoctor.facts.evaluation.static import (
            backward_calls,
            callers_disable_grad,
            grad_enabled_at,
            is_before,
            mode_before,
            mode_calls,
            related,
            self_test,
        )

        evals = [c for c in ctx.method_calls("eval") if not c.args and not c.keywords]
        evals += [c for c in ctx.method_calls("train") if c.args and ctx.value(c.args[0]) is False]
        if not evals:
            return
        seen: set[int] = set()
        by_callee: dict[str, list[ast.Call]] = {}
        for c in ctx.of(ast.Call):
            text = dotted(c.func)
            if text is not None:
                by_callee.setdefault(text, []).append(c)
        for ev in sorted(evals, key=lambda c: (c.lineno, c.col_offset)):
            model = dotted(receiver(ev))
            if not model or not isinstance(ctx.parent(ev), ast.Expr):
                continue  # ``f = freeze(f.eval())`` rebinds the name: not a mode switch we can follow
            fn = ctx.function_of(ev)
            if callers_disable_grad(ctx, fn) or self_test(ctx, ev):
                continue
            later = [
                m
                for m in mode_calls(ctx, fn)
                if is_before(ev, m.call) and related(m.receiver, model) and m.training is not False
            ]
            end = later[0].call if later else None
            if any(is_before(ev, b) and (end is None or is_before(b, end)) for b in backward_calls(ctx, fn)):
                continue
            for call in by_callee.get(model, ()):
                if id(call) in seen or ctx.function_of(call) is not fn or not is_before(ev, call):
                    continue
                if end is not None and not is_before(call, end):
                    continue
                last = mode_before(ctx, call, model, fn)
                if last is None or last.call is not ev:
                    continue
                if grad_enabled_at(ctx, call) is not None or forward_disables_grad(ctx, call.func):
                    continue
                seen.add(id(call))
                yield ctx.report(
                    self,
                    call,
                    f"`{model}` runs in eval mode with autograd recording and no backward pass; wrap "
                    "the evaluation in `torch.inference_mode()` (or `torch.no_grad()`).",
                    help="Wrap evaluation in `torch.inference_mode()`",
                )


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class EvalWithGradMonitor(Monitor):
    """Eval-mode forwards that record an autograd graph which no ``backward()`` ever uses.

    Per layer, eval-mode forwards with autograd on (and something requiring grad) are pending
    until a ``backward()`` consumes them (frozen-BatchNorm fine-tuning does that every step);
    pending forwards become wasted when the layer next runs in training mode, or at the end of
    the run. Fires when a layer wasted at least ``min_forwards`` forwards.
    """

    rule = EvalWithGrad

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self.pending: dict[int, int] = {}
        self.wasted: dict[int, int] = {}
        #: Where and at which step the first pending forward ran.
        self.pending_site: tuple[Site | None, int | None] | None = None
        self.site: Site | None = None
        self.step_seen: int | None = None

    def on_module_forward(self, module: nn.Module, info: ForwardInfo) -> None:
        key = id(module)
        if info.training:
            self._settle(key)
            return
        if not (info.grad_enabled and info.builds_graph):
            return
        if not self.pending and self.pending_site is None:
            from traindoctor.runtime.live import forward_call_site

            self.pending_site = (forward_call_site(), self.session.step)
        self.pending[key] = self.pending.get(key, 0) + 1

    def on_backward(self) -> None:
        self.pending.clear()
        self.pending_site = None

    def _settle(self, key: int) -> None:
        n = self.pending.pop(key, 0)
        if n:
            self.wasted[key] = self.wasted.get(key, 0) + n
            if self.site is None and self.pending_site is not None:
                self.site, self.step_seen = self.pending_site
        if not self.pending:
            self.pending_site = None

    def on_run_end(self) -> None:
        for key in list(self.pending):
            self._settle(key)
        min_forwards = int(self.threshold("min_forwards", 2))
        forwards = max(self.wasted.values(), default=0)
        if forwards < min_forwards:
            return
        from traindoctor.runtime.live import site_kwargs

        self.report(
            f"{forwards} forward pass(es) in eval mode recorded autograd graphs that no backward() "
            "used; wrap evaluation in `torch.no_grad()` or `torch.inference_mode()`.",
            evidence={"forwards": forwards, "layers": len(self.wasted)},
            step=self.step_seen,
            **site_kwargs(self.site),
        )
