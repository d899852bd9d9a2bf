"""What a project function does with the train/eval mode of the modules its parameters hold:
the project model's :data:`PARAMETER_MODES` question (``evaluate(model, loader)`` in ``engine.py``
runs ``model`` in the mode its caller left it in), and what the helpers a function calls leave a
model in."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from traindoctor.facts.evaluation.static import (
    EVAL,
    PARAMETER_MODES,
    TRAIN,
    argument_for,
    backward_calls,
    evaluation_loop,
    grad_enabled_at,
    is_before,
    mode_calls,
    related,
    share_loop,
)
from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import FuncDef


# ---------------------------------------------------------------- helpers' parameters
#: The project model's question "what does this function do with its parameters' train/eval
#: mode" (see :class:`ParameterModesQuery`).


@dataclass(frozen=True)
class ParameterModes:
    """What a function does with the train/eval mode of the modules its parameters hold.

    ``evaluates``: (parameter, line, column) where the function runs the parameter as an evaluation
    forward (autograd off or a loop over evaluation data, no backward in the function) without
    setting its mode first, so the mode is the caller's. ``leaves``: (parameter, TRAIN / EVAL /
    None) for each parameter whose mode the function sets (None: it cannot be told which)."""

    evaluates: tuple[tuple[str, int, int], ...]
    leaves: tuple[tuple[str, str | None], ...]

    def left_in(self, param: str) -> tuple[bool, str | None]:
        """(whether the function sets the mode of ``param``, the mode it leaves it in)."""
        for name, mode in self.leaves:
            if name == param:
                return True, mode
        return False, None


def parameter_modes(ctx: FileContext, fn: FuncDef) -> ParameterModes:
    """The :class:`ParameterModes` of the function ``fn`` of ``ctx``'s file."""
    a = fn.args
    params = [p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs] if p.arg not in ("self", "cls")]
    calls = mode_calls(ctx, fn)
    leaves: list[tuple[str, str | None]] = []
    for param in params:
        mine = [m for m in calls if related(m.receiver, param) and not m.restore]  # a restore sets none
        if not mine:
            continue
        modes = {m.training for m in mine}
        last = mine[-1]
        if len(modes) == 1 or ctx.statement_of(last.call) in fn.body:
            leaves.append((param, None if last.training is None else TRAIN if last.training else EVAL))
        else:
            leaves.append((param, None))
    evaluates: list[tuple[str, int, int]] = []
    if not backward_calls(ctx, fn):
        found: dict[str, tuple[int, int]] = {}
        for sub in ctx.walk(fn):
            if not (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name)):
                continue
            name = sub.func.id
            if name not in params or name in found or ctx.function_of(sub) is not fn:
                continue
            if any(
                (is_before(m.call, sub) and (m.training is not True or related(m.receiver, name)))
                or (related(m.receiver, name) and share_loop(ctx, m.call, sub))
                for m in calls
            ):
                continue  # its mode is set before the forward (or may be: an eval() of another name)
            if grad_enabled_at(ctx, sub) is False or evaluation_loop(ctx, sub) is not None:
                loc = ctx.location(sub)
                found[name] = (loc.row, loc.column)
        evaluates = [(name, row, col) for name, (row, col) in found.items() if not _rebound(ctx, fn, name)]
    return ParameterModes(tuple(evaluates), tuple(leaves))


def _rebound(ctx: FileContext, fn: FuncDef, name: str) -> bool:
    """Whether ``fn`` assigns to its parameter ``name`` (it may then run another module)."""
    return any(isinstance(sub, ast.Name) and sub.id == name and isinstance(sub.ctx, ast.Store) for sub in ctx.walk(fn))


class ParameterModesQuery:
    """The project model's :data:`PARAMETER_MODES` question about a top-level function of a
    project module, answered on first use (``evaluate(model, loader)`` in ``engine.py``)."""

    name = PARAMETER_MODES

    def candidates(self, ctx: FileContext) -> frozenset[str]:
        """Top-level functions with parameters that call one of them or set some module's mode
        (test files have none: they are not training); the others are :meth:`settled`."""
        return frozenset(name for name, fn in self._with_parameters(ctx).items() if _may_have_modes(fn))

    def settled(self, ctx: FileContext) -> dict[str, ParameterModes]:
        """The functions with parameters that neither call a parameter nor call ``.eval()`` /
        ``.train()``: they evaluate none and set no mode (answered with the summary, no need to
        read the module again)."""
        return {name: _NO_MODES for name, fn in self._with_parameters(ctx).items() if not _may_have_modes(fn)}

    @staticmethod
    def _with_parameters(ctx: FileContext) -> dict[str, FuncDef]:
        from traindoctor.facts.data.static import is_test_file

        if is_test_file(ctx.filename):
            return {}
        out: dict[str, FuncDef] = {}
        for s in ctx.tree.body:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and (s.args.args or s.args.kwonlyargs):
                out.setdefault(s.name, s)  # the first definition, as :meth:`answer` reads
        return out

    def answer(self, ctx: FileContext, name: str, fresh: bool) -> ParameterModes | None:
        """The :class:`ParameterModes` of the top-level function ``name``."""
        for stmt in ctx.tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return parameter_modes(ctx, stmt)
        return None


PARAMETER_MODES_QUERY = ParameterModesQuery()

#: The answer for a function that evaluates no parameter and sets no mode.
_NO_MODES = ParameterModes((), ())


def _may_have_modes(fn: FuncDef) -> bool:
    """A syntactic superset of :func:`parameter_modes`' evidence: a call of one of ``fn``'s
    parameters (``model(x)``) or a ``.eval()`` / ``.train()`` call anywhere in its body."""
    a = fn.args
    params = {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    for sub in ast.walk(fn):
        if isinstance(sub, ast.Call):
            func = sub.func
            if isinstance(func, ast.Name) and func.id in params:
                return True
            if isinstance(func, ast.Attribute) and func.attr in ("eval", "train"):
                return True
    return False


def helper_modes(ctx: FileContext, call: ast.Call) -> tuple[ParameterModes, Callable[[str], ast.expr | None]] | None:
    """The :class:`ParameterModes` of the function ``call`` calls (a top-level function of this
    file or of another project module) and how to read what the call passes for a parameter;
    None when the callee is neither."""
    func = call.func
    if isinstance(func, ast.Name) and func.id not in ctx.imports.names:
        local = [
            s for s in ctx.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == func.id
        ]
        if len(local) == 1:
            fn = local[0]
            modes = ctx.shared(f"evaluation.modes.{fn.name}", lambda c: parameter_modes(c, fn))
            return modes, lambda param: argument_for(call, fn, param)
    view = ctx.project
    if view is None or not view.imports_project:
        return None
    resolved = view.resolve(func)
    facts = resolved.function if resolved is not None else None
    if resolved is None or facts is None:
        return None
    answer = resolved.answer(PARAMETER_MODES)
    if not isinstance(answer, ParameterModes):
        return None
    return answer, lambda param: facts.argument(call, param)


def helpers_set_mode(ctx: FileContext, model: str, fn: ast.AST | None, skip: ast.Call) -> bool:
    """Whether a helper called in ``fn`` (other than ``skip``) with ``model`` may leave it in
    another mode than training (``evaluate(model)`` that calls ``model.eval()``)."""
    for call in ctx.of(ast.Call):
        if (
            call is skip
            or ctx.function_of(call) is not fn
            or not (is_before(call, skip) or share_loop(ctx, call, skip))  # runs after ``skip``
            or not any(related(dotted(a) or "", model) for a in [*call.args, *(k.value for k in call.keywords)])
        ):
            continue
        found = helper_modes(ctx, call)
        if found is None:
            continue
        modes, argument = found
        for param, mode in modes.leaves:
            passed = argument(param)
            if mode != TRAIN and passed is not None and related(dotted(passed) or "", model):
                return True
    return False
