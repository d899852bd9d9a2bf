"""TD209 double-activation-before-loss: a sigmoid/softmax output fed to a loss that applies it again."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.runtime.events import Monitor

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: kind -> (loss classes, loss functions, activation functions, activation methods, activation modules)
_KINDS: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...], str, str]] = {
    "sigmoid": (
        ("torch.nn.BCEWithLogitsLoss",),
        ("torch.nn.functional.binary_cross_entropy_with_logits",),
        ("torch.sigmoid", "torch.nn.functional.sigmoid", "torch.special.expit"),
        "sigmoid",
        "Sigmoid",
    ),
    "softmax": (
        ("torch.nn.CrossEntropyLoss",),
        ("torch.nn.functional.cross_entropy",),
        ("torch.softmax", "torch.nn.functional.softmax", "torch.special.softmax"),
        "softmax",
        "Softmax",
    ),
}
_LOSS_NAME = {"sigmoid": "BCEWithLogitsLoss", "softmax": "CrossEntropyLoss"}


class DoubleActivationBeforeLoss(Rule):
    code = "TD209"
    name = "double-activation-before-loss"
    severity = Severity.ERROR
    summary = (
        "A sigmoid output is fed to `BCEWithLogitsLoss` (or a softmax output to `CrossEntropyLoss`), "
        "which applies the activation again: pass the raw logits."
    )
    static = True
    runtime = True
    triggers = ("BCEWithLogitsLoss", "binary_cross_entropy_with_logits", "CrossEntropyLoss", "cross_entropy")
    fixable = "never"

    what_it_does = """
    Reports the input of `nn.BCEWithLogitsLoss` / `F.binary_cross_entropy_with_logits` when it is
    the output of a sigmoid (`torch.sigmoid`, `x.sigmoid()`, `nn.Sigmoid()`, a model that is an
    `nn.Sequential` ending in `nn.Sigmoid()`), and the input of `nn.CrossEntropyLoss` /
    `F.cross_entropy` when it is the output of a softmax (the same forms). A variable counts when
    every value bound to it in its scope is such an output. Test files are skipped.

    At run time the logits losses' inputs are sampled on training steps (autograd on): the rule
    reports when, on every sampled call, autograd's graph shows the input was computed by a
    sigmoid (softmax) and its values lie in [0, 1] (rows summing to 1).

    `log_softmax` before `CrossEntropyLoss` is not reported: `log_softmax` is idempotent, so the
    loss and its gradients are unchanged (only the work is done twice).
    """
    why_bad = """
    `BCEWithLogitsLoss` applies the sigmoid itself (in a numerically stable form) and
    `CrossEntropyLoss` applies `log_softmax` itself. Fed probabilities, they squash them a second
    time: `sigmoid(p)` of a probability lies in [0.5, 0.73], so the loss can never approach zero,
    its gradient is scaled by the sigmoid's slope twice, and the model learns slowly or not at
    all; the probabilities handed to softmax again are nearly uniform, with the same effect. The
    run does not fail, it just trains worse.
    """
    example = """
    import torch

    criterion = torch.nn.BCEWithLogitsLoss()
    probs = torch.sigmoid(model(x))
    loss = criterion(probs, y)
    """
    use_instead = """
    import torch

    criterion = torch.nn.BCEWithLogitsLoss()
    logits = model(x)
    loss = criterion(logits, y)
    probs = torch.sigmoid(logits)  # for metrics only
    """
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.BCEWithLogitsLoss.html",
        "https://pytorch.org/docs/stable/generated/torch.nn.CrossEntropyLoss.html",
    )

    valid = (
        Valid("""
        import torch

        criterion = torch.nn.BCEWithLogitsLoss()
        logits = model(x)
        loss = criterion(logits, y)
        probs = torch.sigmoid(logits)
        """),
        Valid("""
        import torch.nn.functional as F

        # log_softmax is idempotent: cross_entropy gives the same loss
        loss = F.cross_entropy(F.log_softmax(logits, dim=-1), y)
        # a plain BCELoss expects probabilities
        bce = torch.nn.BCELoss()(torch.sigmoid(logits), y)
        """),
        Valid("""
        import torch

        def step(x, y, use_probs):
            out = model(x)
            if use_probs:
                out = out.sigmoid()
            return torch.nn.functional.binary_cross_entropy_with_logits(out, y)
        """),
    )
    invalid = (
        Invalid("""
        import torch

        criterion = torch.nn.BCEWithLogitsLoss()
        probs = torch.sigmoid(model(x))
        loss = criterion(probs, y)  # TD209
        """),
        Invalid("""
        import torch.nn as nn
        import torch.nn.functional as F

        model = nn.Sequential(nn.Linear(16, 10), nn.ReLU(), nn.Linear(10, 3), nn.Softmax(dim=1))
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)  # TD209
            loss.backward()
            out = model(x).softmax(-1)
            loss = nn.CrossEntropyLoss()(out, y)  # TD209
        """),
        Invalid("""
        import torch
        import torch.nn.functional as F

        loss = F.binary_cross_entropy_with_logits(torch.nn.Sigmoid()(logits), target)  # TD209
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import is_test_file

        if is_test_file(ctx.filename):
            return
        for kind, loss_input in _loss_inputs(ctx):
            if _activated(ctx, loss_input, kind):
                act = "sigmoid" if kind == "sigmoid" else "softmax"
                yield ctx.report(
                    self,
                    ctx.statement_of(loss_input),
                    f"`{_LOSS_NAME[kind]}` gets a {act} output and applies the {act} again: "
                    "pass the raw logits (apply the activation only for predictions and metrics).",
                    help="Feed the logits to the loss",
                )


def _loss_inputs(ctx: FileContext) -> Iterator[tuple[str, ast.expr]]:
    """(kind, the loss's input expression) for every logits loss call of the file."""
    for kind, (classes, functions, _acts, _method, _module) in _KINDS.items():
        for call in ctx.calls_to(*functions):
            arg = _first_arg(call)
            if arg is not None:
                yield kind, arg
        if not ctx.calls_to(*classes):
            continue  # no loss object of this kind is built: no call can be one
        for call in ctx.of(ast.Call):
            func = call.func
            if isinstance(func, ast.Call) and ctx.qualname(func.func) in classes:
                instance = True  # ``nn.CrossEntropyLoss()(out, y)``
            elif isinstance(func, ast.Name):
                bound = ctx.bindings_of(func)
                instance = bool(bound) and all(
                    isinstance(b, ast.Call) and ctx.qualname(b.func) in classes for b in bound or ()
                )
            else:
                instance = False
            arg = _first_arg(call) if instance else None
            if arg is not None:
                yield kind, arg


def _first_arg(call: ast.Call) -> ast.expr | None:
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return next((kw.value for kw in call.keywords if kw.arg == "input"), None)


def _activated(ctx: FileContext, expr: ast.expr, kind: str, depth: int = 0) -> bool:
    """Whether ``expr`` is (every value bound to it is) the activation's output."""
    _classes, _functions, acts, method, module = _KINDS[kind]
    if isinstance(expr, ast.Name) and depth < 2:
        bound = ctx.bindings_of(expr)
        return bool(bound) and all(b is not None and _activated(ctx, b, kind, depth + 1) for b in bound or ())
    if not isinstance(expr, ast.Call):
        return False
    func = expr.func
    if ctx.qualname(func) in acts:
        return True
    if isinstance(func, ast.Attribute) and func.attr == method and ctx.qualname(func) is None:
        return True  # ``x.sigmoid()``
    if isinstance(func, ast.Call) and _nn_module(ctx, func) == module:
        return True  # ``nn.Sigmoid()(x)``
    if isinstance(func, ast.Name):
        model = ctx.binding(func)  # ``model(x)`` of ``model = nn.Sequential(..., nn.Sigmoid())``
        if isinstance(model, ast.Call) and ctx.qualname(model.func) == "torch.nn.Sequential" and model.args:
            last = model.args[-1]
            return isinstance(last, ast.Call) and _nn_module(ctx, last) == module
    return False


def _nn_module(ctx: FileContext, call: ast.Call) -> str | None:
    from traindoctor.facts.models.static import torch_nn_name

    return torch_nn_name(ctx, call.func)


# ---------------------------------------------------------------- runtime half
#: Calls of each loss checked at the start; after that, one in ``EVERY``.
FIRST_CALLS = 6
EVERY = 50


class DoubleActivationBeforeLossMonitor(Monitor):
    """Samples the inputs of the logits losses during training: computed by a sigmoid (softmax)
    per autograd's graph, and within [0, 1] (rows summing to 1), on every sampled call."""

    rule = DoubleActivationBeforeLoss

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        #: kind -> [calls, sampled, activated]
        self._counts: dict[str, list[int]] = {}
        self._site: dict[str, Any] = {}

    def on_loss_input(self, kind: str, logits: Any) -> None:
        counts = self._counts.get(kind)
        if counts is None:
            counts = self._counts[kind] = [0, 0, 0]
        counts[0] += 1
        if counts[0] > FIRST_CALLS and counts[0] % EVERY:
            return
        if getattr(logits, "grad_fn", None) is None:
            return  # not part of the graph: nothing to tell
        counts[1] += 1
        if _activation_output(kind, logits):
            counts[2] += 1
            if kind not in self._site:
                from traindoctor.runtime.live import user_site

                self._site[kind] = user_site(1)

    def on_run_end(self) -> None:
        from traindoctor.runtime.live import site_kwargs

        for kind, (calls, sampled, activated) in self._counts.items():
            if sampled < 2 or activated < sampled:
                continue
            act = "sigmoid" if kind == "bce_with_logits" else "softmax"
            loss = "binary_cross_entropy_with_logits" if kind == "bce_with_logits" else "cross_entropy"
            self.report(
                f"`{loss}` received a {act} output on every sampled training call and applies the "
                f"{act} again: pass the raw logits.",
                evidence={"loss": loss, "activation": act, "calls": calls, "sampled": sampled, "activated": activated},
                step=self.session.step,
                **site_kwargs(self._site.get(kind)),
            )


def _activation_output(kind: str, logits: Any) -> bool:
    """The graph says a sigmoid (softmax) computed ``logits`` and the values agree."""
    import torch

    from traindoctor.facts.training.runtime import producer

    x = logits.detach()
    if kind == "bce_with_logits":
        if producer(logits) != "SigmoidBackward0" or not x.numel():
            return False
        low, high = torch.aminmax(x.float())
        return bool(low >= 0) and bool(high <= 1)
    if producer(logits) != "SoftmaxBackward0" or x.dim() < 2 or not x.numel():
        return False
    sums = x.float().sum(dim=1)
    return bool(torch.allclose(sums, torch.ones_like(sums), atol=1e-3))
