"""Where a model's train/eval mode comes from at a point of a file, and the evaluation forwards
that neither ``eval()`` nor ``no_grad`` guards.

:func:`mode_state` follows the mode of one model (its source text, ``model``, ``self.net``) to a
line: the mode calls on it before the line in the same function, the helpers it was handed to
(``train_one_epoch(model)`` leaves it in training mode), what its binding built
(a constructor builds a module in training mode; ``load_model(path)`` returns it in the mode its
own ``return`` leaves it, eval when it calls ``model.eval()``), and, for a model that comes from
outside the function, its mode at the function's entry: what every caller passes (a parameter),
or what the whole file ever sets (a module-level model, the model attribute of a trainer class).
Unknown stays unknown: the answer is TRAIN or EVAL only on evidence, else None.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from traindoctor.facts.evaluation.modes import helper_modes
from traindoctor.facts.evaluation.static import (
    BUILTINS,
    COMPREHENSIONS,
    EVAL,
    MODULE_WRAPPERS,
    PARAMETER_MODES,
    TRAIN,
    Loop,
    ModeCall,
    argument_for,
    backward_calls,
    call_sites,
    callers_disable_grad,
    evaluation_loop,
    evaluation_word,
    grad_disabled_globally,
    grad_enabled_at,
    is_before,
    is_parameter,
    iter_words,
    last_binding_before,
    mode_calls,
    mode_calls_in_file,
    related,
    separate_module,
    share_loop,
    steps_in,
)
from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import FuncDef, Resolved

#: The project model's question "in which mode is the module a function returns"
#: (see :class:`ReturnedModeQuery`).
RETURNED_MODE = "evaluation.returned_mode"
#: Methods that hand back the module they are called on (``model.cuda()``).
_SAME_MODULE = frozenset(
    ("cuda", "to", "cpu", "float", "half", "double", "bfloat16", "type", "requires_grad_", "share_memory", "apply")
)
#: Calls whose result is a module in the mode it was saved in (unpickled): unknown.
_UNPICKLED = frozenset(
    ("torch.load", "torch.jit.load", "torch.hub.load", "pickle.load", "pickle.loads", "dill.load", "joblib.load")
)
#: Calls that hand back a copy of their argument, mode included.
_COPIES = frozenset(("copy.deepcopy", "copy.copy"))
_MAX_DEPTH = 8


@dataclass(frozen=True)
class ModeEvent:
    """A point of a function that sets a model's mode: a mode call on it, or a helper it is handed
    to that leaves it in a mode (``train_one_epoch(model)``); ``mode`` is None when not known."""

    node: ast.Call
    mode: str | None
    restore: ModeCall | None = None


def mode_events(ctx: FileContext, fn: ast.AST | None, model: str) -> list[ModeEvent]:
    """The :class:`ModeEvent` of ``model`` in the body of ``fn``, in source order."""
    key = f"evaluation.mode_events.{id(fn)}.{model}"
    return ctx.shared(key, lambda c: _mode_events(c, fn, model))


def _mode_events(ctx: FileContext, fn: ast.AST | None, model: str) -> list[ModeEvent]:
    out: list[ModeEvent] = []
    for m in mode_calls(ctx, fn):
        if not related(m.receiver, model):
            continue
        if m.restore:
            out.append(ModeEvent(m.call, None, m))
        else:
            out.append(ModeEvent(m.call, None if m.training is None else TRAIN if m.training else EVAL))
    out.extend(_helper_events(ctx, fn, model))
    out.sort(key=lambda e: (e.node.lineno, e.node.col_offset))
    return out


def _helper_events(ctx: FileContext, fn: ast.AST | None, model: str) -> list[ModeEvent]:
    """Calls in ``fn`` of a top-level function (of this file or another project module) handed
    ``model`` that sets the mode of the parameter receiving it (PARAMETER_MODES' ``leaves``)."""
    out: list[ModeEvent] = []
    for call in ctx.of(ast.Call):
        if ctx.function_of(call) is not fn:
            continue
        if not any(related(dotted(a) or "", model) for a in [*call.args, *(k.value for k in call.keywords)]):
            continue
        found = helper_modes(ctx, call)
        if found is None:
            continue
        modes, argument = found
        for param, mode in modes.leaves:
            passed = argument(param)
            if passed is not None and related(dotted(passed) or "", model):
                out.append(ModeEvent(call, mode))
                break
    return out


def mode_state(ctx: FileContext, at: ast.stmt | ast.expr, model: str, fn: ast.AST | None, depth: int = 0) -> str | None:
    """The train/eval mode of ``model`` (dotted text) at ``at`` in ``fn``: TRAIN, EVAL or None.

    On evidence only: the last event before ``at`` that sets its mode (a mode call, a helper that
    leaves it in a mode; ``model.train(was_training)`` puts back the mode it had where
    ``was_training`` was read); else what its last binding in ``fn`` built (:func:`value_mode`);
    else, for a model that comes from outside the function (a parameter, a module-level model, a
    trainer's ``self.model``) whose mode ``fn`` sets only after ``at`` and in no loop around it,
    its mode at the entry of ``fn``: what every caller in the file passes, or -- for the
    module-level model or the trainer attribute -- training when nothing in the file or the
    helpers it is handed to ever puts it in eval mode. Any ``.eval()`` before ``at`` on something
    we cannot tell apart makes the answer None.
    """
    if depth > _MAX_DEPTH:
        return None
    found = _within(ctx, at, model, fn, depth)
    if found != _ENTRY:
        return found
    # its mode at the entry of ``fn``
    if "." not in model and is_parameter(fn, model):
        return _passed_mode(ctx, fn, model, depth)
    if "." not in model and isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and _module_level(ctx, model):
        return TRAIN if global_in_training(ctx, model, depth) else None
    if model.startswith("self.") and model.count(".") == 1 and _plain_class_method(ctx, fn):
        return TRAIN if never_left_in_eval(ctx, model) else None
    return None


#: :func:`_within`'s answer when the mode at a point is the mode ``fn`` was entered with.
_ENTRY = "entry"


def _within(ctx: FileContext, at: ast.stmt | ast.expr, model: str, fn: ast.AST | None, depth: int) -> str | None:
    """What ``fn`` itself says about the mode of ``model`` at ``at`` (TRAIN, EVAL, None), or
    :data:`_ENTRY` when nothing in ``fn`` sets it before ``at``: the mode ``fn`` was entered with."""
    events = mode_events(ctx, fn, model)
    before = [e for e in events if is_before(e.node, at)]
    if before:
        last = before[-1]
        if last.restore is not None and last.restore.save is not None:
            return mode_state(ctx, last.restore.save, model, fn, depth + 1)
        return last.mode
    if any(
        m.training is not True
        and not m.restore
        and is_before(m.call, at)
        and not separate_module(ctx, m.receiver, model, fn)
        for m in mode_calls(ctx, fn)
    ):
        return None
    later = [e.node for e in events if e.restore is None]
    if any(share_loop(ctx, c, at) for c in later):
        return None  # set later in the function, and a loop may run that first
    binding = last_binding_before(ctx, model, at, fn) if "." not in model else None
    if binding is not None:
        return value_mode(ctx, binding, fn, depth + 1)
    if "." not in model and _unpacked_before(ctx, model, at, fn):
        return _unpacked_mode(ctx, model, at, fn, depth + 1)
    return _ENTRY


def training_callers(ctx: FileContext, at: ast.stmt | ast.expr, model: str, fn: ast.AST | None) -> list[ast.Call]:
    """For ``model`` a parameter of ``fn`` whose mode at ``at`` is the one ``fn`` is entered with:
    the calls of ``fn`` in the file that pass a model in training mode for it (a helper called
    with the training model after a training epoch, and with an EMA copy of unknown mode)."""
    if "." in model or not is_parameter(fn, model) or _within(ctx, at, model, fn, 0) != _ENTRY:
        return []
    out = []
    for site in call_sites(ctx, fn):
        arg = argument_for(site, fn, model)
        text = dotted(arg) if arg is not None else None
        if text and mode_state(ctx, site, text, ctx.function_of(site), 1) == TRAIN:
            out.append(site)
    return out


def _passed_mode(ctx: FileContext, fn: FuncDef, model: str, depth: int) -> str | None:
    """TRAIN when every call of ``fn`` in the file passes a model in training mode for ``model``."""
    if depth >= 2:
        return None
    states = []
    for site in call_sites(ctx, fn):
        arg = argument_for(site, fn, model)
        text = dotted(arg) if arg is not None else None
        if text is None:
            return None
        states.append(mode_state(ctx, site, text, ctx.function_of(site), depth + 1))
    return TRAIN if states and all(s == TRAIN for s in states) else None


def _module_level(ctx: FileContext, name: str) -> bool:
    """Whether ``name`` is bound by a plain assignment at the module level of the file."""
    return any(
        isinstance(t, ast.Name) and t.id == name
        for stmt in ctx.of(ast.Assign)
        if ctx.function_of(stmt) is None
        for t in stmt.targets
    )


def global_in_training(ctx: FileContext, name: str, depth: int = 0) -> bool:
    """Whether the module-level model ``name`` is in training mode wherever a function of the file
    runs it: nothing in the file (nor a helper it is handed to) puts it in eval mode
    (:func:`never_left_in_eval`), and it is built in training mode (every module-level binding,
    and any ``global`` rebinding, is a fresh module) or a function of the file sets
    ``name.train()`` (a training step that runs before the evaluations after it)."""
    if not never_left_in_eval(ctx, name):
        return False
    if any(m.training is True and related(m.receiver, name) for m in mode_calls_in_file(ctx)):
        return True
    values = [
        stmt.value
        for stmt in ctx.of(ast.Assign)
        if any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)
        and (ctx.function_of(stmt) is None or _declares_global(ctx, ctx.function_of(stmt), name))
    ]
    return bool(values) and all(value_mode(ctx, v, ctx.function_of(v), depth + 1) == TRAIN for v in values)


def _declares_global(ctx: FileContext, fn: ast.AST | None, name: str) -> bool:
    return fn is not None and any(
        isinstance(g, ast.Global) and name in g.names and ctx.function_of(g) is fn for g in ctx.of(ast.Global)
    )


def _unpacked_before(ctx: FileContext, name: str, at: ast.stmt | ast.expr, fn: ast.AST | None) -> ast.Assign | None:
    """The last ``a, name = call(...)`` of ``fn`` before ``at`` (None when a plain assignment or
    none comes last)."""
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
    if last is None:
        return None
    plain = last_binding_before(ctx, name, at, fn)
    if plain is not None and is_before(last, plain):
        return None
    return last


def _unpacked_mode(ctx: FileContext, name: str, at: ast.stmt | ast.expr, fn: ast.AST | None, depth: int) -> str | None:
    """The mode of ``name`` bound by ``a, name = helper(...)``: what the helper returns in that slot."""
    assign = _unpacked_before(ctx, name, at, fn)
    if assign is None or not isinstance(assign.value, ast.Call) or len(assign.targets) != 1:
        return None
    target = assign.targets[0]
    if not isinstance(target, (ast.Tuple, ast.List)) or any(isinstance(e, ast.Starred) for e in target.elts):
        return None
    slot = next(i for i, e in enumerate(target.elts) if isinstance(e, ast.Name) and e.id == name)
    return _called_mode(ctx, assign.value, (slot, len(target.elts)), depth)


# ---------------------------------------------------------------- what a binding built
def value_mode(ctx: FileContext, value: ast.expr, fn: ast.AST | None, depth: int = 0) -> str | None:
    """The mode of the module the expression ``value`` (the value of an assignment in ``fn``)
    evaluates to: TRAIN for a constructor or a factory of the outside world (a fresh module), the
    mode a project function's ``return`` leaves its module in, EVAL after ``.eval()`` and for
    ``from_pretrained`` of an outside library (it calls ``eval()``), the mode of the source for
    wrappers, ``.cuda()`` and copies; None for an unpickled module (``torch.load``) and anything
    else."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(value, ast.Name):
        # its mode before the statement that uses it (``model = DDP(model)`` reads the old binding)
        return mode_state(ctx, ctx.statement_of(value), value.id, fn, depth + 1)
    if isinstance(value, ast.IfExp):
        modes = {value_mode(ctx, value.body, fn, depth + 1), value_mode(ctx, value.orelse, fn, depth + 1)}
        return modes.pop() if len(modes) == 1 else None
    if not isinstance(value, ast.Call):
        return None
    func = value.func
    qn = ctx.qualname(func) or ""
    if isinstance(func, ast.Attribute) and (isinstance(func.value, ast.Call) or ctx.qualname(func.value) is None):
        # a method of a module value (``DataParallel(net).to(device)``, ``model.eval()``)
        if func.attr == "eval" and not value.args:
            return EVAL
        if func.attr == "train":
            arg = value.args[0] if value.args else None
            flag = True if arg is None else ctx.value(arg)
            return None if not isinstance(flag, bool) else TRAIN if flag else EVAL
        if func.attr in _SAME_MODULE:
            return value_mode(ctx, func.value, fn, depth)  # (a smaller expression: no depth spent)
    if qn in MODULE_WRAPPERS or qn in _COPIES:
        return value_mode(ctx, value.args[0], fn, depth) if value.args else None
    if qn in _UNPICKLED:
        return None
    return _called_mode(ctx, value, None, depth)


def _called_mode(ctx: FileContext, call: ast.Call, slot: tuple[int, int] | None, depth: int) -> str | None:
    """The mode of the module ``call`` returns (in ``slot`` of its tuple result when given)."""
    func = call.func
    if isinstance(func, ast.Name) and func.id not in ctx.imports.names:
        local = [
            s for s in ctx.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == func.id
        ]
        if len(local) == 1:
            return returned_mode(ctx, local[0], slot, depth + 1)
        if any(isinstance(s, ast.ClassDef) and s.name == func.id for s in ctx.tree.body):
            return TRAIN if slot is None else None
    view = ctx.project
    resolved = view.resolve(func) if view is not None and view.imports_project else None
    if resolved is not None:
        if resolved.cls is not None and isinstance(func, (ast.Name, ast.Attribute)) and slot is None:
            return TRAIN  # a project class: a fresh module
        if resolved.function is not None:
            found = resolved.answer(RETURNED_MODE)
            if isinstance(found, tuple):
                return found[slot[0]] if slot is not None and len(found) == slot[1] else None
            return found if slot is None and found in (TRAIN, EVAL) else None
        return None
    if slot is not None:
        return None
    if isinstance(func, ast.Attribute):
        head: ast.expr = func
        while isinstance(head, ast.Attribute):
            head = head.value
        if isinstance(head, ast.Name) and head.id in ("self", "cls"):
            return None  # a method of this class: not followed
        if func.attr == "from_pretrained":
            # transformers/diffusers models come back in eval mode; a project's own is unknown
            outside = isinstance(head, ast.Name) and head.id in ctx.imports.names and not _project_name(ctx, head.id)
            return EVAL if outside else None
        if "load" in func.attr:
            return None  # ``Net.load_from_checkpoint(...)``, ``utils.load_model(...)``: unknown
    return TRAIN


def _project_name(ctx: FileContext, name: str) -> bool:
    view = ctx.project
    return view is not None and name in view.bindings


def returned_mode(ctx: FileContext, fn: FuncDef, slot: tuple[int, int] | None = None, depth: int = 0) -> str | None:
    """The mode of the module ``fn`` returns (in ``slot`` of its tuple result when given): the
    same for every ``return`` of it, else None. A returned parameter is the caller's business:
    None."""
    if depth > _MAX_DEPTH:
        return None
    modes: set[str | None] = set()
    for ret in ctx.walk(fn):
        if not isinstance(ret, ast.Return) or ret.value is None or ctx.function_of(ret) is not fn:
            continue
        value = ret.value
        if slot is not None:
            if not (isinstance(value, ast.Tuple) and len(value.elts) == slot[1]):
                return None
            value = value.elts[slot[0]]
        elif isinstance(value, ast.Tuple):
            return None
        if isinstance(value, ast.Name) and is_parameter(fn, value.id) and not mode_events(ctx, fn, value.id):
            return None
        modes.add(
            mode_state(ctx, ret, value.id, fn, depth + 1)
            if isinstance(value, ast.Name)
            else value_mode(ctx, value, fn, depth + 1)
        )
        if None in modes or len(modes) > 1:
            return None
    return modes.pop() if modes else None


class ReturnedModeQuery:
    """The project model's :data:`RETURNED_MODE` question about a top-level function of a project
    module (``load_model(path)`` in ``utils.py`` calls ``model.eval()`` before returning it):
    TRAIN, EVAL or None, or a tuple of them, one per slot, for a function returning a tuple."""

    name = RETURNED_MODE

    def candidates(self, ctx: FileContext) -> frozenset[str]:
        """Top-level functions that return a value."""
        return frozenset(
            s.name
            for s in ctx.tree.body
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any(isinstance(r, ast.Return) and r.value is not None for r in ast.walk(s))
        )

    def answer(self, ctx: FileContext, name: str, fresh: bool) -> str | tuple[str | None, ...] | None:
        """The mode of what the top-level function ``name`` returns."""
        for stmt in ctx.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                width = _tuple_width(ctx, stmt)
                if width:
                    return tuple(returned_mode(ctx, stmt, (i, width)) for i in range(width))
                return returned_mode(ctx, stmt)
        return None


def _tuple_width(ctx: FileContext, fn: FuncDef) -> int:
    """The length of the tuple every ``return`` of ``fn`` hands back (0: not always a tuple)."""
    widths = {
        len(r.value.elts) if isinstance(r.value, ast.Tuple) else 0
        for r in ctx.walk(fn)
        if isinstance(r, ast.Return) and r.value is not None and ctx.function_of(r) is fn
    }
    return widths.pop() if len(widths) == 1 else 0


RETURNED_MODE_QUERY = ReturnedModeQuery()


# ---------------------------------------------------------------- models that come from outside
def _plain_class_method(ctx: FileContext, fn: ast.AST | None) -> bool:
    """``fn`` is a method of a class that is no ``nn.Module``: its bases are ``object`` or other
    classes of the project that are themselves plain (a trainer holding its model, not a module
    whose submodules follow the mode its own caller sets)."""
    cls = ctx.parent(fn) if fn is not None else None
    return isinstance(cls, ast.ClassDef) and _plain_class(ctx, cls, 0)


def _plain_class(ctx: FileContext, cls: ast.ClassDef, depth: int) -> bool:
    if cls.keywords or depth > 4:
        return False
    local = {c.name: c for c in ctx.tree.body if isinstance(c, ast.ClassDef)}
    for base in cls.bases:
        text = dotted(base) or ""
        if text == "object":
            continue
        if text in local and local[text] is not cls:
            if not _plain_class(ctx, local[text], depth + 1):
                return False
            continue
        view = ctx.project
        resolved = view.resolve(base) if view is not None and view.imports_project else None
        if resolved is None or resolved.cls is None or resolved.summary is None or resolved.project is None:
            return False
        other = resolved.project.module_context(resolved.summary)
        node = (
            next((c for c in other.tree.body if isinstance(c, ast.ClassDef) and c.name == resolved.name), None)
            if other is not None
            else None
        )
        if other is None or node is None or not _plain_class(other, node, depth + 1):
            return False
        if not _file_never_evals(resolved):
            return False  # the base class's file may put the model in eval mode
    return True


def never_left_in_eval(ctx: FileContext, model: str) -> bool:
    """Whether nothing can have put ``model`` (``self.<attr>`` or a module-level name) out of
    training mode: the file calls no ``.eval()`` nor ``.train(<not True>)`` anywhere (a
    ``.train(was_training)`` that puts back a saved mode sets none), and hands the module only
    to wrappers (``nn.DataParallel``), to its own functions (their mode calls are the file's) and
    to project functions that leave its mode alone (``Trainer.validation`` of a trainer whose
    ``training`` calls ``self.model.train()``)."""
    if any(m.training is not True and not m.restore for m in mode_calls_in_file(ctx)):
        return False
    view = ctx.project
    local = {s.name for s in ctx.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for call in ctx.of(ast.Call):
        passed = [a for a in [*call.args, *(k.value for k in call.keywords)] if related(dotted(a) or "", model)]
        if not passed:
            continue
        if (ctx.qualname(call.func) or "") in MODULE_WRAPPERS:
            continue
        if isinstance(call.func, ast.Name) and call.func.id in local and call.func.id not in ctx.imports.names:
            continue
        resolved = view.resolve(call.func) if view is not None and view.imports_project else None
        if resolved is None and _outside_call_leaves_mode(ctx, call):
            continue
        if resolved is not None and resolved.cls is not None and _file_never_evals(resolved):
            continue  # a project wrapper class (``BalancedDataParallel(model)``) that sets no eval mode
        facts = resolved.function if resolved is not None else None
        if resolved is None or facts is None:
            return False
        modes = resolved.answer(PARAMETER_MODES)
        left_in = getattr(modes, "left_in", None)
        if left_in is None:
            return False
        for arg in passed:
            param = facts.param_for(call, arg)
            if param is None or left_in(param)[0]:
                return False
    return True


#: Words of an outside function's name that say it may switch a module to eval mode for good
#: (an evaluation harness, an exporter or quantizer): handed the model, its mode is unknown.
_SWITCHING_WORDS = frozenset(
    ("eval", "evaluate", "evaluation", "test", "predict", "infer", "inference", "validate", "validation", "freeze")
    + ("quantize", "quantization", "prepare", "convert", "fuse", "export", "trace", "script", "deploy")
)


def _file_never_evals(resolved: Resolved) -> bool:
    """Whether the module that defines ``resolved`` calls no ``.eval()`` nor ``.train(<not
    True>)`` anywhere."""
    if resolved.summary is None or resolved.project is None:
        return False
    other = resolved.project.module_context(resolved.summary)
    return other is not None and all(m.training is True or m.restore for m in mode_calls_in_file(other))


def _outside_call_leaves_mode(ctx: FileContext, call: ast.Call) -> bool:
    """Whether ``call`` is a function of the outside world (imported, not of the project) that
    does not look like one that switches a module to eval mode: ``nn.Linear(net.head.in_features,
    ...)``, ``wandb.watch(net)``, ``optim.SGD(...)``."""
    from traindoctor.facts.data.names import name_tokens

    qn = ctx.qualname(call.func)
    if not qn:
        return False
    return not any(t in _SWITCHING_WORDS for part in qn.split(".") for t in name_tokens(part))


# ---------------------------------------------------------------- unguarded evaluation loops
def unguarded_evaluation(ctx: FileContext, call: ast.Call, loop: Loop | None = None) -> str | None:
    """The model text when ``call`` is an evaluation forward that neither ``eval()`` nor
    ``no_grad``/``inference_mode`` guards: a ``model(x)`` (or ``self.model(x)``) in a loop over
    evaluation data with no backward or optimizer step in that loop (nor after it in the
    function), autograd on as far as the file tells, and the model in training mode on evidence
    (see :func:`mode_state`). A loss module (``criterion = nn.BCEWithLogitsLoss()``) is no model.
    None otherwise. Both TD701 (train mode) and TD702 (autograd on) report such a forward.
    """
    func = call.func
    if isinstance(func, ast.Attribute) and not (isinstance(func.value, ast.Name) and func.value.id == "self"):
        return None
    if isinstance(func, ast.Name) and (
        func.id in BUILTINS or func.id in ctx.imports.names or not ctx.bindings_of(func)
    ):
        return None  # builtins (``len``, ``float``) and imported functions are not models
    if not isinstance(func, (ast.Name, ast.Attribute)):
        return None
    if loop is None:
        loop = evaluation_loop(ctx, call)
    if loop is None or steps_in(ctx, loop):
        return None
    fn = ctx.function_of(call)
    if isinstance(fn, ast.Lambda):
        return None
    end = (loop.end_lineno, loop.end_col_offset)
    for b in backward_calls(ctx, fn):
        if (b.lineno, b.col_offset) > end:  # a backward after the loop may use what it computed
            return None
    if grad_enabled_at(ctx, call) is not None or grad_disabled_globally(ctx) or callers_disable_grad(ctx, fn):
        return None
    model = dotted(func) or ""
    if not model or _loss_module(ctx, func) or mode_state(ctx, call, model, fn) != TRAIN:
        return None
    return model


def _loss_module(ctx: FileContext, func: ast.Name | ast.Attribute) -> bool:
    """Whether the callee is a loss: bound to a ``torch.nn`` loss (``nn.BCEWithLogitsLoss(...)``)
    or named like one (``criterion``, ``loss_fn``)."""
    from traindoctor.facts.models.static import model_of

    name = func.id if isinstance(func, ast.Name) else func.attr
    lowered = name.lower()
    if "loss" in lowered or "criterion" in lowered:
        return True
    return any(k.startswith("torch.nn.") and k.endswith("Loss") for k in model_of(ctx, func).kinds)


def _in_iterable(ctx: FileContext, node: ast.AST, loop: Loop) -> bool:
    """Whether ``node`` sits in the iterable part of ``loop`` rather than its body."""
    if isinstance(loop, (ast.For, ast.AsyncFor)):
        return ctx.within(node, loop.iter)
    return any(ctx.within(node, g.iter) for g in loop.generators)


#: Array frameworks without autograd recording: their evaluation steps (``jax.pmap``-ed
#: ``eval_step``, ``model.predict``) have no ``no_grad`` or ``eval()`` to forget.
_OTHER_FRAMEWORKS = frozenset({"jax", "flax", "tensorflow", "keras", "optax"})


def _other_framework_only(ctx: FileContext) -> bool:
    """The file imports JAX/Flax/TensorFlow and nothing from torch: not a PyTorch program."""
    tops = {qualname.split(".", 1)[0] for qualname in ctx.imports.names.values()}
    return bool(tops & _OTHER_FRAMEWORKS) and "torch" not in tops


def unguarded_evaluation_forwards(ctx: FileContext) -> list[tuple[ast.Call, str]]:
    """(forward call, model text) of every :func:`unguarded_evaluation` forward in the file,
    computed once per file and shared by TD701 and TD702."""
    return ctx.shared("gradmode.unguarded_eval", _unguarded_evaluation_forwards)


def _unguarded_evaluation_forwards(ctx: FileContext) -> list[tuple[ast.Call, str]]:
    from traindoctor.facts.data.static import is_test_file

    if is_test_file(ctx.filename) or _other_framework_only(ctx):
        return []
    loops = [
        n
        for n in ctx.of(ast.For, ast.AsyncFor, *COMPREHENSIONS)
        if any(
            evaluation_word(x)
            for x in iter_words(n.iter if isinstance(n, (ast.For, ast.AsyncFor)) else n.generators[0].iter)
        )
    ]
    if not loops:
        return []
    seen: set[int] = set()
    out: list[tuple[ast.Call, str]] = []
    for loop in loops:
        if steps_in(ctx, loop):
            continue
        for sub in ctx.walk(loop):
            if isinstance(sub, ast.Call) and id(sub) not in seen and not _in_iterable(ctx, sub, loop):
                # (a call in this loop's iterable is judged with the loop around it, if any)
                seen.add(id(sub))
                model = unguarded_evaluation(ctx, sub, loop)
                if model is not None:
                    out.append((sub, model))
    out.sort(key=lambda cm: (cm[0].lineno, cm[0].col_offset))
    return out
