"""Where in the user's source a live submodule was built (runtime facts, read at the end of a run).

The doctor does not hook module construction, so a layer found in the live model has no line. This
module finds it by reading the source the way a person would: from the nearest enclosing module
whose class is user code, the ``self.<name> = ...`` assignment that built the child, then down
through ``nn.Sequential(...)`` arguments by position. A model that is a bare ``nn.Sequential``
(no user class above the layer) is matched against the ``Sequential(...)`` calls of the given user
files by the kinds of its children, in order; only a single match counts.

Every step checks the source against the live module (argument count, the called names against the
children's class names), so a changed file or an unusual build (``*layers``, ``add_module``, a
``ModuleList`` filled in a loop) yields None, never a wrong line. No torch import at module level.
"""

from __future__ import annotations

import ast
import inspect
import os
from collections.abc import Iterable
from typing import Any

from traindoctor.runtime.live import Site, is_library_file
from traindoctor.static.source import parse

#: parsed files by (name, modification time, size): a file edited since is read again
_TREES: dict[tuple[str, int, int], ast.Module | None] = {}


def _tree(filename: str) -> ast.Module | None:
    try:
        stat = os.stat(filename)
    except OSError:
        return None
    key = (filename, stat.st_mtime_ns, stat.st_size)
    if key not in _TREES:
        try:
            with open(filename, "rb") as fh:
                parsed = parse(filename, fh.read())
        except OSError:
            parsed = None
        tree = parsed[2] if isinstance(parsed, tuple) else None
        if len(_TREES) > 256:
            _TREES.clear()
        _TREES[key] = tree
    return _TREES[key]


def _called_name(node: ast.AST) -> str | None:
    """``nn.Linear(...)`` / ``Linear(...)`` -> ``"Linear"``."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _user_class_file(cls: type) -> str | None:
    try:
        filename = inspect.getsourcefile(cls)
    except (TypeError, OSError):
        return None
    if not filename or is_library_file(filename):
        return None
    return filename


def _class_node(tree: ast.Module, cls: type) -> ast.ClassDef | None:
    """The ``class`` statement of ``cls`` (by its qualified name) in ``tree``."""
    body: list[ast.stmt] = tree.body
    node: ast.ClassDef | None = None
    for part in cls.__qualname__.split("."):
        if part == "<locals>":
            return None
        found = [s for s in body if isinstance(s, ast.ClassDef) and s.name == part]
        if len(found) != 1:
            return None
        node = found[0]
        body = node.body
    return node


def _self_assignment(cls_node: ast.ClassDef, attr: str) -> ast.expr | None:
    """The value of the single ``self.<attr> = value`` in the class's methods (else None)."""
    values: list[ast.expr] = []
    for node in ast.walk(cls_node):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for t in targets:
            if (
                isinstance(t, ast.Attribute)
                and t.attr == attr
                and isinstance(t.value, ast.Name)
                and t.value.id == "self"
            ):
                values.append(value)
    return values[0] if len(values) == 1 else None


def _matches_children(call: ast.expr, container: Any) -> bool:
    """``Sequential(a(), b(), ...)`` whose positional arguments are the live container's children,
    by count and by called name."""
    if _called_name(call) != "Sequential" or not isinstance(call, ast.Call) or call.keywords:
        return False
    children = list(container._modules.values())
    if len(call.args) != len(children):
        return False
    return all(_called_name(arg) == type(child).__name__ for arg, child in zip(call.args, children))


def _descend(expr: ast.expr | None, modules: list[Any], names: list[str]) -> ast.expr | None:
    """From the expression that built ``modules[0]``, the one that built ``modules[-1]``, going
    through ``Sequential(...)`` arguments (``names[i]`` is ``modules[i + 1]``'s name in
    ``modules[i]``)."""
    for container, name in zip(modules, names):
        if expr is None or not name.isdigit() or not _matches_children(expr, container):
            return None
        assert isinstance(expr, ast.Call)
        expr = expr.args[list(container._modules).index(name)]
    if expr is None or _called_name(expr) != type(modules[-1]).__name__:
        return None
    return expr


def _site(filename: str, node: ast.expr) -> Site:
    return Site(filename, node.lineno, node.col_offset + 1)


def module_source_site(root: Any, qualified: str, hint_files: Iterable[str] = ()) -> Site | None:
    """The source line that built ``root``'s submodule ``qualified`` (``"features.0"``).

    ``hint_files``: user files to search when no user class encloses the submodule (a bare
    ``nn.Sequential`` model built in a script); the first file with exactly one matching
    ``Sequential(...)`` call wins.
    """
    names = qualified.split(".") if qualified else []
    chain = [root]
    for name in names:
        child = chain[-1]._modules.get(name)
        if child is None:
            return None
        chain.append(child)
    if len(chain) < 2:
        return None
    for i in range(len(chain) - 2, -1, -1):
        filename = _user_class_file(type(chain[i]))
        if filename is None:
            continue
        tree = _tree(filename)
        cls_node = _class_node(tree, type(chain[i])) if tree is not None else None
        if cls_node is None:
            return None
        expr = _descend(_self_assignment(cls_node, names[i]), chain[i + 1 :], names[i + 1 :])
        return _site(filename, expr) if expr is not None else None
    seen: set[str] = set()
    for filename in hint_files:
        real = os.path.realpath(filename)
        if real in seen or is_library_file(filename):
            continue
        seen.add(real)
        tree = _tree(filename)
        if tree is None:
            continue
        calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and _matches_children(node, root)]
        if len(calls) == 1:
            expr = _descend(calls[0], chain, names)
            if expr is not None:
                return _site(filename, expr)
    return None
