"""TD704 train-mode-not-restored: the training loop evaluates with ``model.eval()`` and never
switches back with ``model.train()``."""

from __future__ import annotations

import ast
import weakref
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.runtime.events import Monitor

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.records import ForwardInfo
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import FuncDef


class TrainModeNotRestored(Rule):
    code = "TD704"
    name = "train-mode-not-restored"
    severity = Severity.ERROR
    summary = (
        "The training loop switches the model to eval mode and never back: BatchNorm stops updating "
        "and Dropout is off for the rest of training; call `model.train()` after evaluating."
    )
    static = True
    runtime = True
    triggers = ("eval",)
    fixable = "never"

    what_it_does = """
    Reports `model.eval()` inside a training loop (a loop whose own code runs backward), or a call
    from that loop of a helper of the same file that calls `model.eval()` on what it is passed
    (`evaluate(model, val_loader)`), when nothing in the loop, nor in the helpers it calls, calls
    `.train()`, and the same model is trained in the loop (called with autograd on). The mode of
    another model (an EMA copy, a teacher) is not this rule's business.

    At run time the rule watches the layers whose behaviour depends on the mode (BatchNorm that
    tracks running statistics, Dropout with `p > 0`): it reports optimizer steps taken after such
    a layer, once trained in train mode, ran forwards in eval mode with autograd on and stayed in
    eval mode. Layers that were in eval mode from their first forward (deliberately frozen
    BatchNorm) are left alone.
    """
    why_bad = """
    `model.eval()` is sticky: it sets the mode of every submodule until `model.train()` is
    called. A validation pass inside the training loop that is not followed by `model.train()`
    leaves the rest of training in eval mode: BatchNorm normalises with its frozen running
    statistics instead of the batch's and stops updating them, and Dropout is switched off, so
    the regularisation the model was designed with disappears after the first evaluation. The
    run does not fail; the model just trains differently (and usually worse) from then on.
    """
    example = """
    for epoch in range(epochs):
        for x, y in train_loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        model.eval()
        validate(model, val_loader)
    """
    use_instead = """
    for epoch in range(epochs):
        model.train()
        for x, y in train_loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        model.eval()
        validate(model, val_loader)
    """
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.train",
        "https://pytorch.org/docs/stable/notes/autograd.html#evaluation-mode-nn-module-eval",
    )

    valid = (
        Valid("""
        for epoch in range(epochs):
            model.train()
            for x, y in train_loader:
                criterion(model(x), y).backward()
                optimizer.step()
            model.eval()
            evaluate(model)
        """),
        Valid("""
        import torch

        def evaluate(model, loader):
            model.eval()
            with torch.no_grad():
                acc = sum((model(x).argmax(1) == y).sum() for x, y in loader)
            model.train()
            return acc

        for step, (x, y) in enumerate(train_loader):
            criterion(model(x), y).backward()
            optimizer.step()
            if step % 100 == 0:
                evaluate(model, val_loader)
        """),
        Valid("""
        import torch

        for x, y in train_loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            ema.update(model)
            ema_model.eval()  # only the EMA copy is evaluated
            with torch.no_grad():
                ema_model(x)
        """),
    )
    invalid = (
        Invalid("""
        import torch

        for epoch in range(10):
            for x, y in train_loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            model.eval()  # TD704
            with torch.no_grad():
                val_loss = sum(criterion(model(x), y).item() for x, y in val_loader)
        """),
        Invalid("""
        import torch

        def validate(net, loader):
            net.eval()
            with torch.no_grad():
                return sum(net(x).sum().item() for x, _ in loader)

        def train(model, optimizer, train_loader, val_loader):
            model.train()
            for step, (x, y) in enumerate(train_loader):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                if step % 500 == 0:
                    validate(model, val_loader)  # TD704
        """),
        Invalid("""
        import torch

        while step < max_steps:
            loss = model(batch).mean()
            loss.backward()
            opt.step()
            step += 1
            if step % 1000 == 0:
                model.eval()  # TD704
                with torch.no_grad():
                    model(val_batch)
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import is_test_file

        if is_test_file(ctx.filename):
            return
        for anchor, model in _unrestored(ctx):
            yield ctx.report(
                self,
                anchor,
                f"`{model}` is switched to eval mode inside the training loop and never back: the "
                f"following steps train with BatchNorm frozen and Dropout off; call `{model}.train()` "
                "after evaluating.",
                help=f"Call `{model}.train()` after the evaluation",
            )


def _eval_calls(ctx: FileContext) -> Iterator[tuple[ast.Call, str]]:
    for call in ctx.method_calls("eval"):
        if not call.args and not call.keywords:
            from traindoctor.static.names import dotted, receiver

            name = dotted(receiver(call))
            if name:
                yield call, name


def _unrestored(ctx: FileContext) -> Iterator[tuple[ast.Call, str]]:
    """(where to report, the model) of each unrestored ``eval()``."""
    from traindoctor.facts.evaluation.static import argument_for, is_parameter
    from traindoctor.facts.training.static import training_loop_of
    from traindoctor.static.names import dotted

    seen: set[int] = set()
    for call, name in _eval_calls(ctx):
        loop = training_loop_of(ctx, call)
        if loop is not None:
            if _restores(ctx, loop) is False and _trained_in(ctx, loop, name) and id(call) not in seen:
                seen.add(id(call))
                yield call, name
            continue
        fn = ctx.function_of(call)
        root = name.split(".", 1)[0]
        if not is_parameter(fn, root) or _restores_in(fn):
            continue  # the helper switches back itself, or its model is not what it is given
        for site in _sites(ctx, fn):
            site_loop = training_loop_of(ctx, site)
            arg = argument_for(site, fn, root)
            model = dotted(arg) if arg is not None else None
            if site_loop is None or not model or id(site) in seen:
                continue
            model = model + name[len(root) :]
            if _restores(ctx, site_loop) is False and _trained_in(ctx, site_loop, model):
                seen.add(id(site))
                yield site, model


def _sites(ctx: FileContext, fn: FuncDef) -> list[ast.Call]:
    from traindoctor.facts.evaluation.static import call_sites

    return call_sites(ctx, fn)


def _restores_in(fn: ast.AST) -> bool:
    from traindoctor.facts.training.static import calls_method

    return calls_method(fn, "train")


def _restores(ctx: FileContext, loop: ast.AST) -> bool | None:
    """Whether the loop's own code, or a helper it calls, calls ``.train(...)``."""
    from traindoctor.facts.training.static import called_helpers, calls_method

    helpers: list[ast.AST] = [fn for _c, fn in called_helpers(ctx, loop)]
    return calls_method(loop, "train", helpers=helpers)


def _trained_in(ctx: FileContext, loop: ast.AST, model: str) -> bool:
    """``model(...)`` is called in the loop's own code with autograd on (not under no_grad)."""
    from traindoctor.facts.evaluation.static import grad_enabled_at
    from traindoctor.facts.training.static import own_calls
    from traindoctor.static.names import dotted

    for call in own_calls(loop):
        if dotted(call.func) == model and grad_enabled_at(ctx, call) is not False:
            return True
    return False


# ---------------------------------------------------------------- runtime half
class TrainModeNotRestoredMonitor(Monitor):
    """Optimizer steps taken while a mode-sensitive layer that trained in train mode stays in
    eval mode (seen through the module probe's eval-mode-with-autograd forwards)."""

    rule = TrainModeNotRestored

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        #: id -> (weakref, type name) of layers seen in eval mode with autograd on after training.
        self._watch: dict[int, tuple[Any, str]] = {}
        self._param_ids: dict[int, frozenset[int]] = {}
        self.eval_steps = 0
        self.first_step: int | None = None
        self.layers: dict[str, int] = {}

    def on_module_forward(self, module: Any, info: ForwardInfo) -> None:
        if info.training or not info.grad_enabled or not info.mode_sensitive or id(module) in self._watch:
            return
        from traindoctor.runtime.probes.modules import module_stats

        rec = module_stats(self.session).layers.get(id(module))
        if rec is None or rec.ref() is not module or rec.total(training=True, grad=True) == 0:
            return  # in eval mode from its first forward: frozen on purpose
        self._watch[id(module)] = (weakref.ref(module), type(module).__name__)

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        if not self._watch or self.session.backward_calls_this_step == 0:
            return
        params = self._param_ids.get(id(optimizer))
        if params is None:
            params = frozenset(id(p) for g in optimizer.param_groups for p in g["params"])
            self._param_ids[id(optimizer)] = params
        in_eval: list[str] = []
        for key, (ref, type_name) in list(self._watch.items()):
            module = ref()
            if module is None or module.training:
                del self._watch[key]  # restored (or gone)
                continue
            owned = [p for p in module.parameters(recurse=False)]
            if not owned or any(id(p) in params for p in owned):
                in_eval.append(type_name)
        if in_eval:
            self.eval_steps += 1
            if self.first_step is None:
                self.first_step = self.session.step + 1
            for type_name in set(in_eval):
                self.layers[type_name] = max(self.layers.get(type_name, 0), in_eval.count(type_name))

    def on_run_end(self) -> None:
        if self.eval_steps < 2:
            return
        kinds = ", ".join(f"{n} {t}" for t, n in sorted(self.layers.items()))
        self.report(
            f"{self.eval_steps} optimizer steps ran with layers left in eval mode ({kinds}) after "
            "they had trained in train mode: call `model.train()` after evaluating.",
            evidence={
                "eval_mode_steps": self.eval_steps,
                "first_step": self.first_step,
                "layers": dict(sorted(self.layers.items())),
            },
            step=self.first_step,
        )
