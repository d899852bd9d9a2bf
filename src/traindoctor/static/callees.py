"""The function a call runs, as far as the project tells: a top-level function of the same file, or
one of another project module (through the project model). Rules and facts that ask what a callee
does with an argument (freezes its parameters, updates a scaler) read the definition found here,
in the context of the file that holds it; unknown (the outside world, a rebound name, a method)
stays None.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

FuncDef = ast.FunctionDef | ast.AsyncFunctionDef
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def local_function(ctx: FileContext, name: str) -> FuncDef | None:
    """The one top-level function ``name`` of the file, when no other top-level statement binds
    that name (a later assignment or class would make the call run something else)."""
    return ctx.shared("callees.local_functions", _local_functions).get(name)


def _local_functions(ctx: FileContext) -> dict[str, FuncDef | None]:
    """Top-level name -> its function (None: bound more than once, or not only by a ``def``)."""
    table: dict[str, FuncDef | None] = {}
    for stmt in ctx.tree.body:
        if isinstance(stmt, _FUNCS):
            table[stmt.name] = None if stmt.name in table else stmt
        elif isinstance(stmt, ast.ClassDef):
            table[stmt.name] = None
        elif isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                if isinstance(t, ast.Name):
                    table[t.id] = None
    return table


def function_definition(ctx: FileContext, call: ast.Call) -> tuple[FileContext, FuncDef] | None:
    """(the file's context, the definition) of the function ``call`` runs, else None."""
    func = call.func
    if isinstance(func, ast.Name) and func.id not in ctx.imports.names:
        fn = local_function(ctx, func.id)
        return (ctx, fn) if fn is not None else None
    view = ctx.project
    if view is None or not isinstance(func, (ast.Name, ast.Attribute)) or not view.imports_project:
        return None
    resolved = view.resolve(func)
    if resolved is None or resolved.function is None or resolved.summary is None or resolved.project is None:
        return None
    module = resolved.project.module_context(resolved.summary)
    if module is None:
        return None
    fn = local_function(module, resolved.name)
    return (module, fn) if fn is not None else None


def parameter_for(fn: FuncDef, call: ast.Call, arg: ast.expr) -> str | None:
    """The parameter of ``fn`` that receives ``arg`` at ``call`` (None when it cannot be told:
    ``*args`` before it, or an argument ``fn`` takes through ``*args``/``**kwargs``)."""
    from traindoctor.static.project import receiving_parameter

    a = fn.args
    positional = tuple(p.arg for p in [*a.posonlyargs, *a.args])
    return receiving_parameter(call, arg, positional, tuple(p.arg for p in a.kwonlyargs))


def positional_arguments(ctx: FileContext, call: ast.Call) -> list[ast.expr] | None:
    """The positional arguments ``call`` passes, ``*name`` expanded when ``name`` is bound once to
    a tuple or list the file spells out (``params = (loader, model, scaler); train(*params)``);
    None when a starred argument cannot be expanded."""
    out: list[ast.expr] = []
    for value in call.args:
        if not isinstance(value, ast.Starred):
            out.append(value)
            continue
        inner: ast.expr | None = value.value
        if isinstance(inner, ast.Name):
            inner = ctx.binding(inner)
        if not isinstance(inner, (ast.Tuple, ast.List)) or any(isinstance(e, ast.Starred) for e in inner.elts):
            return None
        out.extend(inner.elts)
    return out


def argument_for(ctx: FileContext, fn: FuncDef, call: ast.Call, param: str) -> ast.expr | None:
    """The expression ``call`` (in the file of ``ctx``) passes for the parameter ``param`` of ``fn``
    (by keyword, by position, or inside a spelled-out ``*args`` tuple); None when not passed or
    when it cannot be told."""
    for kw in call.keywords:
        if kw.arg == param:
            return kw.value
    a = fn.args
    positional = [p.arg for p in [*a.posonlyargs, *a.args]]
    if param not in positional:
        return None
    passed = positional_arguments(ctx, call)
    index = positional.index(param)
    if passed is None or index >= len(passed):
        return None
    return passed[index]
