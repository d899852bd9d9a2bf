"""TD701 eval-in-train-mode: evaluation forward passes while the model is still in training mode."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Related, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.names import dotted
from traindoctor.static.vocab import EVAL_LOOP_TRIGGERS

if TYPE_CHECKING:  # pragma: no cover
    from types import FrameType

    from torch import nn

    from traindoctor.facts.models.static import ModelInfo
    from traindoctor.runtime.live import Site
    from traindoctor.runtime.probes.modules import LayerStats
    from traindoctor.runtime.records import ForwardInfo
    from traindoctor.static.context import FileContext


def is_evaluation(ctx: FileContext, call: ast.Call, fn: ast.AST | None) -> bool:
    """A forward pass that evaluates: its function runs no backward, or it loops over eval data
    (a ``for`` loop or a comprehension / generator expression)."""
    from traindoctor.facts.batching.static import eval_named
    from traindoctor.facts.evaluation.static import backward_calls, evaluation_loop

    if not backward_calls(ctx, fn):
        return True
    if fn is not None and eval_named(getattr(fn, "name", "")):
        return True
    return evaluation_loop(ctx, call) is not None


def _layers(infos: list[ModelInfo]) -> str:
    """ "BatchNorm", "Dropout" or both: the mode-dependent layers every candidate model has."""
    bn = all(i.has_batchnorm for i in infos)
    if bn and all(i.has_dropout for i in infos):
        return "BatchNorm and Dropout"
    return "BatchNorm" if bn else "Dropout"


class EvalInTrainMode(Rule):
    code = "TD701"
    name = "eval-in-train-mode"
    severity = Severity.ERROR
    summary = (
        "A model with BatchNorm or Dropout is evaluated while still in training mode; call "
        "`model.eval()` before evaluating (and `model.train()` after)."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("no_grad", "inference_mode", "set_grad_enabled", *EVAL_LOOP_TRIGGERS)
    fixable = "never"

    what_it_does = """
    Reports a forward call under `torch.no_grad()` / `torch.inference_mode()` (or in a function
    decorated with one of them) that evaluates, i.e. its function runs no backward pass or it
    iterates a loader named like val/test/eval, when the model contains BatchNorm or Dropout
    (known from the file: an `nn.Sequential`, an `nn.Module` subclass, a torchvision
    constructor) and is in training mode there. Training mode is established on evidence only:
    the last mode call on the model before the forward is `.train()`, or a helper it was handed
    to left it in training mode (`train_one_epoch(model)`), or the model was created in the same
    function and nothing sets its mode (a constructor builds a module in training mode; a
    project `load_model()` that calls `model.eval()` before returning hands it back in eval mode,
    and so does a library's `from_pretrained`; an unpickled module's mode is unknown), or a
    caller of an `evaluate(model, ...)` helper passes a model in training mode (the finding
    then names that call). A module-level model, or a trainer class's `self.model`, is in
    training mode inside a function that does not set it when nothing in the file (nor the
    project base classes and helpers it is handed to) ever puts it in eval mode;
    `model.train(was_training)` puts back the mode saved from `model.training` and sets none.

    The most common form is also reported: an evaluation loop (a `for` loop, comprehension or
    generator expression over a loader named like val/valid/test/eval, with no backward pass or
    optimizer step in it or after it) that runs the model with neither `model.eval()` nor
    `no_grad`/`inference_mode`. Such a forward gets both TD701 (training mode) and TD702
    (autograd on). Lightning's `validation_step` is left alone: the Trainer switches modes and
    autograd around it.
    """
    why_bad = """
    `no_grad` turns off autograd; it does not change the module mode. In training mode
    BatchNorm normalises with the statistics of the evaluation batch *and updates its running
    statistics with evaluation data*, and Dropout keeps zeroing activations. The reported metrics
    are noisy and too pessimistic, depend on the evaluation batch size, and the evaluation pass
    silently changes the model that is later saved or trained further.
    """
    example = """
    for epoch in range(epochs):
        model.train()
        train_one_epoch(model, train_loader)
        with torch.no_grad():
            for x, y in val_loader:
                correct += (model(x).argmax(1) == y).sum().item()
    """
    use_instead = """
    for epoch in range(epochs):
        model.train()
        train_one_epoch(model, train_loader)
        model.eval()
        with torch.no_grad():
            for x, y in val_loader:
                correct += (model(x).argmax(1) == y).sum().item()
    """
    options = """
    No thresholds. At run time: BatchNorm layers that track running statistics or Dropout with
    p > 0, in training mode, forwarded with autograd disabled, in a model that is also trained in
    the run. Deliberate re-estimation of BatchNorm statistics is left alone (BatchNorm with
    `momentum=None`, forwards inside `update_bn`/`update_bn_stats` or a `precise_bn` module).
    """
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.eval",
        "https://pytorch.org/docs/stable/notes/autograd.html#locally-disable-grad-doc",
    )

    valid = (
        Valid("""
        import torch
        from torch import nn

        model = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.2), nn.Linear(64, 2))
        for epoch in range(20):
            model.train()
            for x, y in train_loader:
                nn.functional.cross_entropy(model(x), y).backward()
            model.eval()
            with torch.inference_mode():
                val_loss = sum(nn.functional.cross_entropy(model(x), y).item() for x, y in val_loader)
        """),
        Valid("""
        import lightning as L
        import torch.nn as nn

        class Classifier(L.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = nn.Sequential(nn.Linear(32, 32), nn.BatchNorm1d(32), nn.Linear(32, 4))

            def training_step(self, batch, batch_idx):
                x, y = batch
                return nn.functional.cross_entropy(self.net(x), y)

            def validation_step(self, batch, batch_idx):
                # the Trainer calls eval() and disables autograd around validation
                x, y = batch
                self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))
        """),
        Valid("""
        import torch
        from torch import nn

        # test-time adaptation: the loop over test data trains on purpose
        model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        for x in test_loader:
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
        """),
        Valid("""
        import torch
        from torch import nn

        model = nn.Sequential(nn.Linear(10, 10), nn.BatchNorm1d(10), nn.Linear(10, 2))
        for epoch in range(10):
            model.train()
            for x, y in train_loader:
                criterion(model(x), y).backward()
            model.eval()
            with torch.no_grad():
                for x, y in val_loader:
                    out = model(x)
        """),
        Valid("""
        import torch
        from torch import nn

        # no BatchNorm/Dropout: train and eval mode compute the same thing
        model = nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 2))
        with torch.no_grad():
            preds = model(inputs)
        """),
        Valid("""
        import torch

        @torch.no_grad()
        def evaluate(model, loader):
            model.eval()
            return [model(x) for x, _ in loader]
        """),
        Valid("""
        import torch
        import torchvision

        teacher = torchvision.models.resnet50()
        student = torchvision.models.resnet18()
        teacher.eval()
        for x, y in loader:
            with torch.no_grad():
                soft = teacher(x)
            loss = kd_loss(student(x), soft, y)
            loss.backward()
        """),
        Valid("""
        import torch

        def evaluate(model, loader):
            # the model comes from elsewhere; its mode is unknown here
            with torch.no_grad():
                return [model(x) for x, _ in loader]
        """),
        Valid("""
        import torch
        from torch import nn

        def load_for_eval(path):
            model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))
            model.load_state_dict(torch.load(path))
            model.eval()
            return model

        def score(path, batches):
            net = load_for_eval(path)  # handed back in eval mode
            with torch.no_grad():
                return [net(x) for x in batches]
        """),
    )
    invalid = (
        Invalid("""
        import torch
        from torch import nn

        model = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.2), nn.Linear(64, 2))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for epoch in range(20):
            model.train()
            for x, y in train_loader:
                optimizer.zero_grad()
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            # neither model.eval() nor no_grad: TD701 and TD702
            val_loss = sum(nn.functional.cross_entropy(model(x), y).item() for x, y in val_loader)  # TD701
        """),
        Invalid("""
        import torch
        import torchvision

        def train(model, optimizer, train_loader, val_loader):
            model.train()
            for x, y in train_loader:
                optimizer.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            with torch.no_grad():
                # a comprehension over the validation loader is the same evaluation loop
                preds = [model(x).argmax(1) for x, _ in val_loader]  # TD701
            return preds

        net = torchvision.models.resnet18()
        train(net, torch.optim.SGD(net.parameters(), lr=0.1), train_dl, val_dl)
        """),
        Invalid("""
        import torch
        from torch import nn

        model = nn.Sequential(nn.Linear(10, 10), nn.BatchNorm1d(10), nn.Linear(10, 2))
        for epoch in range(10):
            model.train()
            for x, y in train_loader:
                criterion(model(x), y).backward()
            with torch.no_grad():
                for x, y in val_loader:
                    out = model(x)  # TD701
        """),
        Invalid("""
        import torch
        import torchvision.models as tvm

        net = tvm.resnet50(weights="IMAGENET1K_V2")
        with torch.inference_mode():
            logits = net(batch)  # TD701
        """),
        Invalid("""
        import torch
        import torch.nn as nn

        class Classifier(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Linear(32, 32)
                self.drop = nn.Dropout(0.5)
                self.head = nn.Linear(32, 4)

        @torch.no_grad()
        def evaluate(model, loader):
            return sum((model(x).argmax(1) == y).sum().item() for x, y in loader)  # TD701

        def main():
            model = Classifier()
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(5):
                model.train()
                for x, y in train_loader:
                    opt.zero_grad()
                    nn.functional.cross_entropy(model(x), y).backward()
                    opt.step()
                print(evaluate(model, val_loader))
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.evaluation.flow import unguarded_evaluation_forwards
        from traindoctor.facts.evaluation.static import forward_models
        from traindoctor.facts.models.static import model_of

        yield from self._check_guarded(ctx)
        yield from self._check_helper_calls(ctx)
        for call, model in unguarded_evaluation_forwards(ctx):
            infos = [model_of(ctx, e) for e in forward_models(ctx, call, ctx.function_of(call))]
            if not infos or not all(i.has_batchnorm or i.has_dropout for i in infos):
                continue
            yield ctx.report(
                self,
                call,
                f"`{model}` is evaluated in training mode and with autograd on (neither `eval()` "
                f"nor `no_grad`), so its {_layers(infos)} behave as in training; call "
                f"`{model}.eval()` and wrap the loop in `torch.inference_mode()`.",
                help="Call `model.eval()` before evaluation",
            )

    def _check_helper_calls(self, ctx: FileContext) -> Iterable[Finding]:
        """``evaluate(model, loader)`` of another project module that runs ``model`` as an
        evaluation forward in the mode its caller left it in, called here with a model in
        training mode: reported at the call, the helper's forward as the related location."""
        from traindoctor.facts.data.static import is_test_file
        from traindoctor.facts.evaluation.flow import mode_state
        from traindoctor.facts.evaluation.modes import ParameterModes, helpers_set_mode
        from traindoctor.facts.evaluation.static import PARAMETER_MODES, TRAIN
        from traindoctor.facts.models.static import model_of
        from traindoctor.static.project import Place

        view = ctx.project
        if view is None or not view.imports_project or is_test_file(ctx.filename):
            return
        for call, resolved in view.calls():
            facts = resolved.function
            if facts is None:
                continue
            modes = resolved.answer(PARAMETER_MODES)
            if not isinstance(modes, ParameterModes):
                continue
            fn = ctx.function_of(call)
            for param, row, column in modes.evaluates:
                arg = facts.argument(call, param)
                model = dotted(arg) if arg is not None else None
                if arg is None or not model:
                    continue
                info = model_of(ctx, arg)
                if not (info.has_batchnorm or info.has_dropout):
                    continue
                if mode_state(ctx, call, model, fn) != TRAIN or helpers_set_mode(ctx, model, fn, call):
                    continue
                yield ctx.report(
                    self,
                    call,
                    f"`{model}` is in training mode here and `{facts.name}` evaluates it without "
                    f"calling `eval()`, so its {_layers([info])} behave as in training; call "
                    f"`{model}.eval()` before this call (or `{param}.eval()` in `{facts.name}`).",
                    help="Call `model.eval()` before evaluation",
                    related=view.related(
                        Place(resolved.path, row, column), f"`{facts.name}` runs `{param}` here without `eval()`"
                    ),
                )

    def _check_guarded(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.evaluation.flow import mode_state
        from traindoctor.facts.evaluation.static import TRAIN, forward_models, no_grad_calls

        for call in no_grad_calls(ctx, where=_may_be_model_call):
            func = call.func
            fn = ctx.function_of(call)
            if not is_evaluation(ctx, call, fn):
                continue
            model = dotted(func) or ""
            infos = _mode_dependent(ctx, forward_models(ctx, call, fn))
            if infos and mode_state(ctx, call, model, fn) == TRAIN:
                yield ctx.report(
                    self,
                    call,
                    f"`{model}` is evaluated in training mode, so its {_layers(infos)} behave as in training; "
                    f"call `{model}.eval()` before evaluating.",
                    help="Call `model.eval()` before evaluation",
                )
                continue
            yield from self._some_callers(ctx, call, model, fn)

    def _some_callers(self, ctx: FileContext, call: ast.Call, model: str, fn: ast.AST | None) -> Iterable[Finding]:
        """A helper whose model parameter keeps the mode it is called with, called (among others
        of unknown mode) with a model in training mode: reported at the forward, citing the
        first such call."""
        from traindoctor.facts.evaluation.flow import training_callers
        from traindoctor.facts.evaluation.static import argument_for, is_parameter

        if not is_parameter(fn, model):
            return
        for site in training_callers(ctx, call, model, fn):
            arg = argument_for(site, fn, model)
            infos = _mode_dependent(ctx, [arg] if arg is not None else [])
            if not infos:
                continue
            name = getattr(fn, "name", "")
            loc = ctx.location(site)
            yield ctx.report(
                self,
                call,
                f"`{model}` is evaluated in training mode when `{name}` is called at line {loc.row}, so "
                f"its {_layers(infos)} behave as in training; call `{model}.eval()` before evaluating.",
                help="Call `model.eval()` before evaluation",
                related=(Related(ctx.filename, loc, f"`{name}` is called here with a model in training mode"),),
            )
            return


def _mode_dependent(ctx: FileContext, exprs: list[ast.expr]) -> list[ModelInfo]:
    """What the models ``exprs`` are made of, when every one has BatchNorm or Dropout (else [])."""
    from traindoctor.facts.models.static import model_of

    infos = [model_of(ctx, e) for e in exprs]
    return infos if infos and all(i.has_batchnorm or i.has_dropout for i in infos) else []


def _may_be_model_call(call: ast.Call) -> bool:
    """``model(x)`` or ``self.model(x)``: the callee shapes a forward of a model variable takes."""
    func = call.func
    if isinstance(func, ast.Attribute):
        return isinstance(func.value, ast.Name) and func.value.id == "self"
    return isinstance(func, ast.Name)


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class _Layer:
    """A mode-sensitive layer the monitor saw run in training mode with autograd off."""

    __slots__ = ("forwards", "stats")

    def __init__(self, stats: LayerStats) -> None:
        self.stats = stats
        #: Its train-mode forwards without autograd.
        self.forwards = 0


class EvalInTrainModeMonitor(Monitor):
    """Forwards with autograd off while BatchNorm (tracking running statistics) or Dropout
    (p > 0) layers are in training mode, in a model that is also trained in this run.

    Deliberate statistics re-estimation is left alone: BatchNorm with ``momentum=None``
    (cumulative averaging, as ``torch.optim.swa_utils.update_bn`` sets) and forwards under a
    function named ``update_bn``/``update_bn_stats`` or from a ``precise_bn`` module.
    """

    rule = EvalInTrainMode

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        #: id(layer) -> its statistics and train-mode no-grad forwards
        self.layers: dict[int, _Layer] = {}
        self.kinds: dict[str, int] = {}
        self.site: Site | None = None
        self.step_seen: int | None = None

    def on_module_forward(self, module: nn.Module, info: ForwardInfo) -> None:
        if not (info.training and not info.grad_enabled and info.mode_sensitive):
            return
        if info.kind.endswith("batchnorm") and getattr(module, "momentum", 0.1) is None:
            return
        entry = self.layers.get(id(module))
        if entry is None:
            if _recalibrating():
                return
            from traindoctor.runtime.probes.modules import module_stats

            rec = module_stats(self.session).layers.get(id(module))
            if rec is None:
                return
            self.kinds[info.kind] = self.kinds.get(info.kind, 0) + 1
            entry = self.layers[id(module)] = _Layer(rec)
        entry.forwards += 1
        if self.site is None:
            from traindoctor.runtime.live import forward_call_site

            self.site = forward_call_site()
            self.step_seen = self.session.step

    def on_run_end(self) -> None:
        trained = [layer.forwards for layer in self.layers.values() if layer.stats.total(training=True, grad=True) > 0]
        if not trained:
            return  # never trained here (e.g. a teacher model): not an evaluation mistake
        forwards = max(trained)
        from traindoctor.runtime.live import site_kwargs

        effects = []
        if any(kind.endswith("batchnorm") for kind in self.kinds):
            effects.append("BatchNorm updated its running statistics on that data")
        if any(kind == "dropout" for kind in self.kinds):
            effects.append("Dropout stayed on")
        what = " and ".join(effects) or "its train-mode layers stayed in training behaviour"
        self.report(
            f"The model ran {forwards} forward pass(es) without autograd while in training mode, "
            f"so {what}; call `model.eval()` before evaluating (and `model.train()` after).",
            evidence={
                "forwards": forwards,
                "layers": dict(sorted(self.kinds.items())),
            },
            step=self.step_seen,
            **site_kwargs(self.site),
        )


def _recalibrating() -> bool:
    """Whether the current forward runs inside a BatchNorm re-estimation helper."""
    import sys

    frame: FrameType | None = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if code.co_name in ("update_bn", "update_bn_stats") or "precise_bn" in code.co_filename:
            return True
        frame = frame.f_back
    return False
