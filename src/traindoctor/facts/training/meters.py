"""Objects that sum what they are handed: ``losses.update(loss, n)`` on an ``AverageMeter`` whose
``update`` does ``self.sum += val * n``. The loop that hands such a method a loss tensor keeps
every step's autograd graph alive, exactly as ``total += loss`` would (TD703), even though the
sum is written in another class, often in another module (``utils.py``).

A receiver counts when the file binds it once to an instance of a class of the same file or of
another project module, and that class's method of the called name adds the parameter that
receives the argument into an attribute of ``self`` (``+=``, or ``self.x = self.x + ...``) without
turning it into a number first (``.item()``, ``float()``, ``.detach()``).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

_NUMBER = frozenset({"item", "detach", "tolist", "cpu", "numpy"})
_NUMBER_FUNCS = frozenset({"float", "int"})


def accumulated_argument(ctx: FileContext, call: ast.Call, arg: ast.expr) -> tuple[FileContext, ast.AST] | None:
    """(the class's file, the statement that sums it) when ``call`` hands ``arg`` to a method that
    adds it into an attribute of its object (see the module docs), else None."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return None
    found = _instance_class(ctx, func.value)
    if found is None:
        return None
    module, cls = found
    method = next(
        (s for s in cls.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and s.name == func.attr), None
    )
    if method is None:
        return None
    a = method.args
    params = [p.arg for p in [*a.posonlyargs, *a.args]][1:]  # ``self`` receives the object
    param: str | None = None
    for i, value in enumerate(call.args):
        if isinstance(value, ast.Starred):
            return None
        if value is arg:
            param = params[i] if i < len(params) else None
    for kw in call.keywords:
        if kw.value is arg:
            param = kw.arg
    if param is None or any(
        isinstance(n, ast.Name) and n.id == param and isinstance(n.ctx, ast.Store) for n in ast.walk(method)
    ):
        return None  # not passed to a known parameter, or the parameter is rebound first
    for node in ast.walk(method):
        if _sums_into_self(node, param):
            return module, node
    return None


def _sums_into_self(node: ast.AST, param: str) -> bool:
    """``self.sum += val * n`` / ``self.sum = self.sum + val`` with ``val`` not made a number."""
    target: ast.expr
    value: ast.expr
    if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
        target, value = node.target, node.value
    elif (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.value, ast.BinOp)
        and isinstance(node.value.op, ast.Add)
        and dotted(node.value.left) == dotted(node.targets[0])
    ):
        target, value = node.targets[0], node.value.right
    else:
        return False
    if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self"):
        return False
    return _raw_use(value, param)


def _raw_use(value: ast.AST, param: str) -> bool:
    """Whether ``value`` reads ``param`` other than through a conversion to a number."""
    if isinstance(value, ast.Name):
        return value.id == param
    if isinstance(value, ast.Call):
        func = value.func
        if isinstance(func, ast.Attribute) and func.attr in _NUMBER:
            return False
        if isinstance(func, ast.Name) and func.id in _NUMBER_FUNCS:
            return False
    return any(_raw_use(child, param) for child in ast.iter_child_nodes(value))


def _instance_class(ctx: FileContext, name: ast.Name) -> tuple[FileContext, ast.ClassDef] | None:
    """The class ``name`` is an instance of: bound once to ``Cls(...)``, ``Cls`` a class of the
    file or of another project module."""
    bound = ctx.binding(name)
    if not (isinstance(bound, ast.Call) and isinstance(bound.func, (ast.Name, ast.Attribute))):
        return None
    func = bound.func
    if isinstance(func, ast.Name) and func.id not in ctx.imports.names:
        classes = [s for s in ctx.tree.body if isinstance(s, ast.ClassDef) and s.name == func.id]
        if classes:
            return (ctx, classes[0]) if len(classes) == 1 else None
    view = ctx.project
    if view is None or not view.imports_project:
        return None
    resolved = view.resolve(func)
    if resolved is None or resolved.cls is None or resolved.summary is None or resolved.project is None:
        return None
    module = resolved.project.module_context(resolved.summary)
    if module is None:
        return None
    classes = [s for s in module.tree.body if isinstance(s, ast.ClassDef) and s.name == resolved.name]
    return (module, classes[0]) if len(classes) == 1 else None
