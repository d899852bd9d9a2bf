"""What a function of another project module does with a checkpoint: the project model's
:data:`CHECKPOINT_SAVES` question.

Training scripts save through their project's helpers: ``utils.save_checkpoint(state, is_best,
filename)`` or ``self.saver.save_checkpoint(state, is_best)`` writes the dict the caller built
(the helper *saves its parameter*), and ``misc.save_model(args, epoch, model, optimizer, ...)``
builds the dict itself (the helper *writes* these keys). The first makes the call a save of the
caller's dict, judged in the caller's file like a ``torch.save``; the second tells a resume in the
caller's file which states the checkpoint it reads back holds. Answered per top-level function,
and per method for a top-level class, from the module's own checkpoint index, on first use
(:mod:`~traindoctor.facts.checkpoint.static.summary` answers; this module says what the answer is
and reads it).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

from traindoctor.facts.checkpoint.static.vocabulary import RX_READS_CHECKPOINT, RX_SAVE_WORD
from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import Place, Resolved

#: The project model's question "what does this function save" (see :class:`CheckpointSavesQuery`).
CHECKPOINT_SAVES = "checkpoint-saves"


@dataclass(frozen=True)
class SaveHelper:
    """What one function does with a checkpoint.

    ``saves_params``: the parameters whose values it saves as it is handed them
    (``torch.save(state, filename)``; a model's and an optimizer's state in two files), and
    ``path_param`` the parameter that names the file (None: the helper picks it). ``written``: (key, kind) of the states it saves in a dict it builds itself (model
    weights, optimizer, scheduler, scaler), empty when it builds none it can read. ``place``:
    where it saves."""

    positional: tuple[str, ...]
    keyword_only: tuple[str, ...]
    saves_params: tuple[str, ...]
    path_param: str | None
    written: tuple[tuple[str, str], ...]
    place: Place

    def saved_object(self, call: ast.Call, method: bool) -> ast.expr | None:
        """What ``call`` hands the helper to save: the argument for its one saved parameter, or
        a tuple of the arguments for several (``None`` passed for one leaves it out); None when
        an argument cannot be told."""
        values = []
        for param in self.saves_params:
            value = self.argument(call, param, method)
            if value is None:
                return None
            if not (isinstance(value, ast.Constant) and value.value is None):
                values.append(value)
        if len(values) == 1 and len(self.saves_params) == 1:
            return values[0]
        return ast.copy_location(ast.Tuple(elts=values, ctx=ast.Load()), call)

    def argument(self, call: ast.Call, param: str | None, method: bool) -> ast.expr | None:
        """What ``call`` passes for ``param`` (None: nothing, or it cannot be told)."""
        from traindoctor.static.project import passed_argument

        if param is None:
            return None
        return passed_argument(call, tuple(self.positional), param, method)


#: A top-level class's answer: (method name, what it saves) for each method that saves.
ClassSaves = tuple[tuple[str, SaveHelper], ...]


def project_save_helper(ctx: FileContext, call: ast.Call) -> tuple[SaveHelper, bool, Resolved] | None:
    """(what the project function or method ``call`` calls saves, whether it is a method call,
    the definition) for a call of a function of another project module (``utils.save_checkpoint``)
    or of a method of an object of a project class (``self.saver.save_checkpoint(...)`` where
    ``self.saver = Saver(args)``); None otherwise."""
    view = ctx.project
    if view is None:
        return None
    func = call.func
    resolved = view.resolve(func) if isinstance(func, (ast.Name, ast.Attribute)) else None
    if resolved is not None and resolved.function is not None:
        answer = resolved.answer(CHECKPOINT_SAVES)
        return (answer, False, resolved) if isinstance(answer, SaveHelper) else None
    if not isinstance(func, ast.Attribute):
        return None
    owner = _instance_class(ctx, func.value)
    if owner is None:
        return None
    resolved = view.resolve(owner)
    if resolved is None or resolved.cls is None:
        return None
    answer = resolved.answer(CHECKPOINT_SAVES)
    if not isinstance(answer, tuple):
        return None
    for method, helper in answer:
        if method == func.attr:
            return helper, True, resolved
    return None


def _instance_class(ctx: FileContext, expr: ast.expr) -> ast.expr | None:
    """The callee that built the object ``expr`` holds, when one construction is all it is
    bound to: ``saver`` bound once to ``Saver(args)``, ``self.saver`` assigned once in the class
    (``self.saver = Saver(args)``)."""
    if isinstance(expr, ast.Name):
        bound = ctx.bindings_of(expr)
        if bound and len(bound) == 1 and isinstance(bound[0], ast.Call):
            return bound[0].func
        return None
    if not (isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self"):
        return None
    cls = ctx.enclosing(expr, ast.ClassDef)
    if cls is None:
        return None
    values: list[ast.expr] = []
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Attribute) and dotted(target) == dotted(expr):
                    values.append(node.value)
                elif isinstance(target, ast.Tuple) and any(dotted(t) == dotted(expr) for t in target.elts):
                    return None
    if len(values) == 1 and isinstance(values[0], ast.Call):
        return values[0].func
    return None


def project_save_calls(ctx: FileContext) -> list[tuple[ast.Call, SaveHelper, bool]]:
    """Calls in the file of ``ctx`` whose callee is a project helper that saves: (call, what
    it saves, whether it is a method call). Only calls whose callee's name says it may save
    (``save``, ``checkpoint``, ``ckpt``) are asked about."""
    if ctx.project is None:
        return []
    out = []
    for call in ctx.of(ast.Call):
        func = call.func
        name = (func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else "").lower()
        if not RX_SAVE_WORD.search(name) or (RX_READS_CHECKPOINT.search(name) and "save" not in name):
            continue  # (``load_checkpoint(path, model)`` reads one)
        found = project_save_helper(ctx, call)
        if found is not None:
            out.append((call, found[0], found[1]))
    return out
