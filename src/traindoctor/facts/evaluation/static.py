"""Autograd and train/eval mode facts at a point of a file: no_grad regions, mode calls, backward, losses.

The evaluation rules (TD701-TD703) ask the same questions: "is autograd off here?" (inside
``with torch.no_grad()`` / ``torch.inference_mode()`` / ``torch.set_grad_enabled(False)`` or a
function decorated with one of them), "which ``.eval()`` / ``.train()`` call last set this model's
mode before this line?", "does this function run backward?", "which variables hold a loss that
is still attached to the graph?". Flow is approximated by source order inside one function, plus
one level of call sites for helper functions such as ``evaluate(model, loader)``.
"""

from __future__ import annotations

import ast
import builtins
from bisect import bisect_left
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, TypeGuard

from traindoctor.facts.evaluation.grad import (
    BACKWARD_METHODS as _BACKWARD_METHODS,
)
from traindoctor.facts.evaluation.grad import (
    FUNCS as _FUNCS,
)
from traindoctor.facts.evaluation.grad import (
    backward_calls as backward_calls,
)
from traindoctor.facts.evaluation.grad import (
    call_sites as call_sites,
)
from traindoctor.facts.evaluation.grad import (
    callers_disable_grad as callers_disable_grad,
)
from traindoctor.facts.evaluation.grad import (
    decorator_switch as decorator_switch,
)
from traindoctor.facts.evaluation.grad import (
    grad_disabled_globally as grad_disabled_globally,
)
from traindoctor.facts.evaluation.grad import (
    grad_enabled_at as grad_enabled_at,
)
from traindoctor.facts.evaluation.grad import (
    grad_switch as _grad_switch,
)
from traindoctor.facts.evaluation.grad import (
    same_function as same_function,
)
from traindoctor.facts.evaluation.grad import (
    self_test as self_test,
)
from traindoctor.static.names import dotted, receiver

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import FuncDef


@dataclass(frozen=True)
class ModeCall:
    """``x.eval()`` / ``x.train()`` / ``x.train(False)``; ``training`` is None when not constant.

    ``restore``: ``x.train(was_training)`` where ``was_training`` was read from ``x.training``
    earlier in the same function: it puts back the mode ``x`` had there (``save``, the statement
    that read it), it sets no mode of its own."""

    call: ast.Call
    receiver: str
    training: bool | None
    restore: bool = False
    save: ast.stmt | None = None


def _mode_call(ctx: FileContext, call: ast.Call, fn: ast.AST | None) -> ModeCall | None:
    """The :class:`ModeCall` of a ``.train(...)`` call (None: more than one argument)."""
    if len(call.args) + len(call.keywords) > 1:
        return None
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "mode"), None)
    model = dotted(receiver(call)) or ""
    if arg is None:
        return ModeCall(call, model, True)
    v = ctx.value(arg)
    if isinstance(v, bool):
        return ModeCall(call, model, v)
    if isinstance(arg, ast.Name):
        saved = last_binding_before(ctx, arg.id, call, fn)
        if isinstance(saved, ast.Attribute) and saved.attr == "training" and related(dotted(saved.value) or "", model):
            return ModeCall(call, model, None, restore=True, save=ctx.statement_of(saved))
    return ModeCall(call, model, None)


def mode_calls(ctx: FileContext, fn: ast.AST | None) -> list[ModeCall]:
    """Calls that set a module's train/eval mode in the body of ``fn``, in source order."""
    out: list[ModeCall] = []
    for call in ctx.method_calls("eval"):
        if not call.args and not call.keywords and same_function(ctx, call, fn):
            out.append(ModeCall(call, dotted(receiver(call)) or "", False))
    for call in ctx.method_calls("train"):
        if same_function(ctx, call, fn) and (found := _mode_call(ctx, call, fn)) is not None:
            out.append(found)
    out.sort(key=lambda m: (m.call.lineno, m.call.col_offset))
    return out


def related(receiver: str, model: str) -> bool:
    """Whether a mode call on ``receiver`` sets the mode of ``model`` (same object or a wrapper)."""
    if not receiver or not model:
        return False
    return receiver == model or receiver.startswith(model + ".") or model.startswith(receiver + ".")


def mode_before(ctx: FileContext, node: ast.stmt | ast.expr, model: str, fn: ast.AST | None) -> ModeCall | None:
    """The last mode call on ``model`` in ``fn`` before ``node`` in source order."""
    pos = (node.lineno, node.col_offset)
    last = None
    for m in mode_calls(ctx, fn):
        if (m.call.lineno, m.call.col_offset) < pos and related(m.receiver, model):
            last = m
    return last


def is_before(a: ast.stmt | ast.expr, b: ast.stmt | ast.expr) -> bool:
    return (a.lineno, a.col_offset) < (b.lineno, b.col_offset)


def param_index(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, name: str) -> int | None:
    a = fn.args
    params = [p.arg for p in [*a.posonlyargs, *a.args]]
    if params and params[0] == "self":
        params = params[1:]
    return params.index(name) if name in params else None


def argument_for(call: ast.Call, fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda, name: str) -> ast.expr | None:
    """The expression a call site passes for parameter ``name`` of ``fn``."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    index = param_index(fn, name)
    if index is not None and index < len(call.args) and not any(isinstance(a, ast.Starred) for a in call.args):
        return call.args[index]
    return None


def is_parameter(fn: ast.AST | None, name: str) -> TypeGuard[FuncDef]:
    """Whether ``name`` is a parameter of the function ``fn`` (a result of ``ctx.function_of``:
    a def, a lambda or None; a lambda's parameters do not count)."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    a = fn.args
    return name in {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]}


# ---------------------------------------------------------------- losses
_LOSS_NAMES = ("loss", "criterion", "crit")


def _is_lossy_call(ctx: FileContext, call: ast.Call) -> bool:
    """A call that returns a loss: ``criterion(...)``, ``F.cross_entropy(...)``, ``nn.MSELoss()(...)``."""
    qn = ctx.qualname(call.func) or ""
    if qn.startswith("torch.nn.functional.") and (
        "loss" in qn
        or qn.rsplit(".", 1)[-1]
        in (
            "cross_entropy",
            "nll_loss",
            "mse_loss",
            "l1_loss",
            "binary_cross_entropy",
            "binary_cross_entropy_with_logits",
            "kl_div",
            "smooth_l1_loss",
            "huber_loss",
        )
    ):
        return True
    if isinstance(call.func, ast.Call):
        inner = ctx.qualname(call.func.func) or ""
        return inner.startswith("torch.nn.") and inner.endswith("Loss")
    text = (dotted(call.func) or "").rsplit(".", 1)[-1].lower()
    return any(k in text for k in _LOSS_NAMES)


def _plain_loss_expr(ctx: FileContext, expr: ast.AST) -> bool:
    """An expression that yields a graph-attached loss tensor (no ``.item()`` / ``.detach()``)."""
    if isinstance(expr, ast.Call):
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in (
            "item",
            "detach",
            "tolist",
            "numpy",
            "detach_",
            "cpu",
        ):
            return False
        return _is_lossy_call(ctx, expr)
    if isinstance(expr, ast.BinOp):
        return _plain_loss_expr(ctx, expr.left) or _plain_loss_expr(ctx, expr.right)
    return False


def backward_receivers(ctx: FileContext, fn: ast.AST | None) -> set[str]:
    """Names whose value is backpropagated in ``fn``: ``loss.backward()``, ``scaler.scale(loss)``,
    ``accelerator.backward(loss)``, ``(loss / k).backward()``."""
    out: set[str] = set()
    for call in backward_calls(ctx, fn):
        roots: list[ast.AST] = []
        if isinstance(call.func, ast.Attribute) and call.func.attr == "backward":
            roots += call.args[:1]  # accelerator.backward(loss)
            roots.append(call.func.value)
        else:
            roots += call.args[:1]
        while roots:
            r = roots.pop()
            if isinstance(r, ast.Name):
                out.add(r.id)
            elif isinstance(r, ast.BinOp):
                roots += [r.left, r.right]
            elif isinstance(r, ast.Call):
                roots += r.args[:1]
                if isinstance(r.func, ast.Attribute) and r.func.attr not in ("item", "detach"):
                    roots.append(r.func.value)
    return out


#: (function, name) -> the positions and values of the ``name = value`` statements in that
#: function's own body (None: module level), in source order. See :func:`_assignments`.
_Assignments = dict[tuple[ast.AST | None, str], tuple[list[tuple[int, int]], list[ast.expr]]]


def _assignments(ctx: FileContext) -> _Assignments:
    """The file's plain assignments to names, filed by the function that makes them and the name
    (``a = b = v`` under both names), so that a look-up costs a bisection, not a pass over the file."""
    table: _Assignments = {}
    for assign in ctx.of(ast.Assign):
        names = {t.id for t in assign.targets if isinstance(t, ast.Name)}
        if not names:
            continue
        fn = ctx.function_of(assign)
        pos = (assign.lineno, assign.col_offset)
        for name in names:
            positions, values = table.setdefault((fn, name), ([], []))
            positions.append(pos)
            values.append(assign.value)
    return table


def last_binding_before(ctx: FileContext, name: str, node: ast.stmt | ast.expr, fn: ast.AST | None) -> ast.expr | None:
    """The value last assigned to ``name`` in ``fn`` before ``node`` (source order); None if none."""
    found = ctx.shared("evaluation.assignments", _assignments).get((fn, name))
    if found is None:
        return None
    positions, values = found
    before = bisect_left(positions, (node.lineno, node.col_offset))
    return values[before - 1] if before else None


def attached_loss(ctx: FileContext, name: str, at: ast.stmt | ast.expr, fn: ast.AST | None) -> bool:
    """Whether ``name`` holds a graph-attached loss at ``at``.

    True when its last assignment before ``at`` is a loss computation (criterion call, or
    arithmetic over one) and either it is backpropagated in the same function or the function runs
    a backward pass at all (it is a training step). A value last assigned from ``.item()`` /
    ``.detach()`` is never attached.
    """
    value = last_binding_before(ctx, name, at, fn)
    backward_names = backward_receivers(ctx, fn)
    if value is None:
        # ``loss, n_correct = cal_performance(pred, gold)`` then ``loss.backward()``: the loss a
        # helper returns in a tuple, backpropagated here
        return name in backward_names and _unpacked_from_call(ctx, name, at, fn)
    if (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Attribute)
        and value.func.attr
        in (
            "item",
            "detach",
            "tolist",
            "numpy",
        )
    ):
        return False
    if name in backward_names:
        return _plain_loss_expr(ctx, value) or isinstance(value, (ast.Call, ast.BinOp))
    return _plain_loss_expr(ctx, value) and bool(backward_calls(ctx, fn))


def _unpacked_from_call(ctx: FileContext, name: str, at: ast.stmt | ast.expr, fn: ast.AST | None) -> bool:
    """Whether the last statement of ``fn`` before ``at`` that binds ``name`` unpacks a call's
    tuple result (``loss, n = helper(...)``) and no plain assignment of ``name`` precedes ``at``."""
    last: ast.Assign | None = None
    for assign in ctx.of(ast.Assign):
        if ctx.function_of(assign) is not fn or not is_before(assign, at):
            continue
        for target in assign.targets:
            if isinstance(target, (ast.Tuple, ast.List)) and any(
                isinstance(e, ast.Name) and e.id == name for e in target.elts
            ):
                if last is None or is_before(last, assign):
                    last = assign
    return last is not None and isinstance(last.value, ast.Call) and not _other_binding_between(ctx, name, last, at, fn)


def _other_binding_between(
    ctx: FileContext, name: str, after: ast.stmt, at: ast.stmt | ast.expr, fn: ast.AST | None
) -> bool:
    """A store of ``name`` in ``fn`` after ``after`` and before ``at`` (a loop target, ``with ... as``)."""
    for node in ctx.of(ast.Name):
        if (
            node.id == name
            and isinstance(node.ctx, ast.Store)
            and ctx.function_of(node) is fn
            and is_before(after, node)
            and is_before(node, at)
            and ctx.statement_of(node) is not after
        ):
            return True
    return False


# ---------------------------------------------------------------- train/eval mode flow
TRAIN, EVAL = "train", "eval"
#: The project model's question "what does this function do with its parameters' train/eval
#: mode" (see :class:`~traindoctor.facts.evaluation.modes.ParameterModesQuery`).
PARAMETER_MODES = "evaluation.parameter_modes"
#: Calls that wrap a module and leave its mode alone.
MODULE_WRAPPERS = frozenset(
    (
        "torch.nn.DataParallel",
        "torch.nn.parallel.DataParallel",
        "torch.nn.parallel.DistributedDataParallel",
        "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
        "torch.compile",
    )
)


def separate_module(ctx: FileContext, other: str, model: str, fn: ast.AST | None) -> bool:
    """Whether the plain name ``other`` certainly holds another object than ``model``: ``fn`` binds
    it only by plain assignments of ``None`` or of calls that do not mention ``model``
    (``teacher = create_model(...)``),
    it is no parameter, and ``model`` is never assigned from it."""
    root = model.split(".", 1)[0]
    if not other or "." in other or other == root or is_parameter(fn, other):
        return False
    table = ctx.shared("evaluation.assignments", _assignments)
    entry = table.get((fn, other))
    if entry is None:
        return False

    def names(expr: ast.AST) -> set[str]:
        return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}

    if not all(
        (isinstance(v, ast.Call) and root not in names(v)) or (isinstance(v, ast.Constant) and v.value is None)
        for v in entry[1]
    ):
        return False
    own = table.get((fn, root))
    if own is not None and any(other in names(v) for v in own[1]):
        return False
    stores = sum(
        1 for n in ctx.of(ast.Name) if n.id == other and isinstance(n.ctx, ast.Store) and ctx.function_of(n) is fn
    )
    return stores == len(entry[1])  # no loop target, tuple unpacking or ``with ... as`` binds it


def mode_calls_in_file(ctx: FileContext) -> list[ModeCall]:
    """Every mode call of the file (:func:`mode_calls` of all its functions)."""
    return ctx.shared("evaluation.file_mode_calls", _file_mode_calls)


def _file_mode_calls(ctx: FileContext) -> list[ModeCall]:
    out = [ModeCall(c, dotted(receiver(c)) or "", False) for c in ctx.method_calls("eval") if not c.args]
    for call in ctx.method_calls("train"):
        found = _mode_call(ctx, call, ctx.function_of(call))
        out.append(found if found is not None else ModeCall(call, dotted(receiver(call)) or "", None))
    return out


def share_loop(ctx: FileContext, a: ast.AST, b: ast.AST) -> bool:
    """Whether ``a`` and ``b`` sit in one loop of their function (one may then run before the other)."""
    around = {id(loop) for loop in ctx.enclosing_loops(b)}
    return any(id(loop) in around for loop in ctx.enclosing_loops(a))


def forward_models(ctx: FileContext, call: ast.Call, fn: ast.AST | None) -> list[ast.expr]:
    """Expressions that may be the module ``call`` runs: its callee, or what callers pass for it."""
    func = call.func
    if isinstance(func, ast.Name) and is_parameter(fn, func.id):
        out = []
        for site in call_sites(ctx, fn):
            arg = argument_for(site, fn, func.id)
            if arg is not None:
                out.append(arg)
        return out
    return [func]


def freezes_parameters(ctx: FileContext) -> bool:
    """The file turns gradients off on parameters (``requires_grad_(False)``, ``p.requires_grad = False``)."""
    if ctx.source.isascii() and "requires_grad" not in ctx.source:
        return False  # both forms spell it (ASCII files: identifiers are as written): not walked
    for call in ctx.method_calls("requires_grad_"):
        if call.args and ctx.value(call.args[0]) is False:
            return True
    for node in ctx.of(ast.Assign):
        if any(isinstance(t, ast.Attribute) and t.attr == "requires_grad" for t in node.targets):
            if ctx.value(node.value) is False:
                return True
    return False


def freezes_whole(ctx: FileContext, model: str) -> bool:
    """Whether the file turns gradients off on the parameters of ``model`` (its source text) as a
    whole: ``model.requires_grad_(False)``, or a loop over ``model.parameters()`` /
    ``model.named_parameters()`` setting ``requires_grad = False`` (all of them, or all but the
    names it lists). What trains afterwards is what the file replaces, lists or switches back on
    (a new head)."""
    if not freezes_parameters(ctx):
        return False
    for call in ctx.method_calls("requires_grad_"):
        if call.args and ctx.value(call.args[0]) is False and dotted(receiver(call)) == model:
            return True
    for loop in ctx.of(ast.For):
        it = loop.iter
        if not (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Attribute)
            and it.func.attr in ("parameters", "named_parameters")
            and dotted(it.func.value) == model
        ):
            continue
        target = loop.target
        if isinstance(target, ast.Tuple) and len(target.elts) == 2:  # for name, param in named_parameters()
            target = target.elts[1]
        if not isinstance(target, ast.Name):
            continue
        name = target.id
        # directly, or under a name filter (``if name not in ["fc.weight", "fc.bias"]:``)
        for stmt in (n for n in ast.walk(loop) if isinstance(n, ast.Assign)):
            if (
                isinstance(stmt, ast.Assign)
                and any(
                    isinstance(t, ast.Attribute)
                    and t.attr == "requires_grad"
                    and isinstance(t.value, ast.Name)
                    and t.value.id == name
                    for t in stmt.targets
                )
                and ctx.value(stmt.value) is False
            ):
                return True
    return False


def no_grad_calls(ctx: FileContext, where: Callable[[ast.Call], bool] | None = None) -> list[ast.Call]:
    """Calls that run with autograd off: inside a no_grad/inference_mode block or decorated function.

    ``where`` keeps only the calls a caller asks about, tested before the (costlier) look at the
    blocks around each call."""
    regions: list[ast.AST] = []
    for node in ctx.of(ast.With, ast.AsyncWith):
        if any(_grad_switch(ctx, item.context_expr) is False for item in node.items):
            regions.append(node)
    for node in ctx.of(ast.FunctionDef, ast.AsyncFunctionDef):
        if any(decorator_switch(ctx, d) is False for d in node.decorator_list):
            regions.append(node)
    seen: set[int] = set()
    out: list[ast.Call] = []
    for region in regions:
        for sub in ctx.walk(region):
            if isinstance(sub, ast.Call) and id(sub) not in seen:
                seen.add(id(sub))
                if (where is None or where(sub)) and grad_enabled_at(ctx, sub) is False:
                    out.append(sub)
    out.sort(key=lambda c: (c.lineno, c.col_offset))
    return out


# ---------------------------------------------------------------- evaluation loops
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
#: A loop as the evaluation facts see one: a ``for`` statement or a comprehension.
Loop = ast.For | ast.AsyncFor | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp


def loop_iterables(ctx: FileContext, node: ast.AST) -> list[tuple[Loop, ast.expr]]:
    """(loop, iterable) for the ``for`` loops *and* comprehensions around ``node`` in its function,
    innermost first: ``[model(x) for x, _ in val_loader]`` is the same evaluation loop as the
    ``for`` statement it abbreviates. ``node`` must sit in the body, not in the iterable itself."""
    out: list[tuple[Loop, ast.expr]] = []
    for anc in ctx.ancestors(node):
        if isinstance(anc, _FUNCS):
            break
        if isinstance(anc, (ast.For, ast.AsyncFor)):
            if not ctx.within(node, anc.iter):
                out.append((anc, anc.iter))
        elif isinstance(anc, COMPREHENSIONS):
            gens = anc.generators
            if gens and not any(ctx.within(node, g.iter) for g in gens):
                out.append((anc, gens[0].iter))
    return out


def evaluation_loop(ctx: FileContext, node: ast.AST) -> Loop | None:
    """The loop (``for`` or comprehension) around ``node`` that iterates evaluation data: its
    iterable is named like val/valid/test/eval (``val_loader``, ``enumerate(self.test_dl)``)."""

    for loop, iterable in loop_iterables(ctx, node):
        if any(evaluation_word(n) for n in iter_words(iterable)):
            return loop
    return None


def steps_in(ctx: FileContext, region: ast.AST) -> bool:
    """A backward pass or an optimizer step inside ``region``."""
    for attr in (*_BACKWARD_METHODS, "step"):
        for call in ctx.method_calls(attr):
            if ctx.within(call, region):
                if (
                    attr != "step"
                    or "opt" in (dotted(receiver(call)) or "").lower()
                    or "scaler" in (dotted(receiver(call)) or "").lower()
                ):
                    return True
    return False


BUILTINS = frozenset(dir(builtins))


@lru_cache(maxsize=4096)
def evaluation_word(word: str) -> bool:
    from traindoctor.facts.data.static import is_evaluation_name

    return is_evaluation_name(word)


def iter_words(node: ast.AST, depth: int = 0) -> Iterable[str]:
    """Identifiers of a loop's iterable, cheaply: ``enumerate(tqdm(self.val_loader))`` ->
    enumerate, tqdm, self, val_loader (calls, attributes and subscripts a few levels deep)."""
    if depth > 4:
        return
    if isinstance(node, ast.Name):
        yield node.id
    elif isinstance(node, ast.Attribute):
        yield node.attr
        yield from iter_words(node.value, depth + 1)
    elif isinstance(node, ast.Call):
        yield from iter_words(node.func, depth + 1)
        for arg in node.args:
            yield from iter_words(arg, depth + 1)
    elif isinstance(node, ast.Subscript):
        yield from iter_words(node.value, depth + 1)
