"""Hyperparameters read from a yacs ``CfgNode`` are known values: the project's defaults module.

Research code bases built on yacs (SlowFast, detectron2-style, Swin) keep every default in one
module and read them through a config object handed around as a parameter::

    # slowfast/config/defaults.py
    _C = CfgNode()
    _C.SOLVER = CfgNode()
    _C.SOLVER.WEIGHT_DECAY = 1e-4

    # slowfast/models/optimizer.py
    torch.optim.SGD(model.parameters(), weight_decay=cfg.SOLVER.WEIGHT_DECAY)

A read such as ``cfg.SOLVER.WEIGHT_DECAY`` (two or more keys, the first an upper-case section as
yacs projects name them; the leaves may be lower-case, ``cfg.TRAIN.weight_decay``) evaluates to
the default the project's one defaults module assigns to that key path, as the default of an
argparse option does. Unknown stays unknown: no defaults module or two of them, a key path it does
not assign or assigns twice, a value that is not a constant. A run's YAML file may override a
default, as a command line overrides an argparse default; rules read a default as the value a run
gets unless told otherwise.
"""

from __future__ import annotations

import ast
import os
import re
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traindoctor.static.args import UNKNOWN

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: File names a yacs defaults module goes by.
_NAMES = frozenset({"defaults.py", "default.py", "config.py", "configs.py"})
#: How deep below the project root to look for it.
_DEPTH = 3
_SKIP = frozenset({"tests", "test", "docs", "build", "dist", "site-packages", "node_modules", "third_party"})
_KEY = re.compile(r"[A-Z][A-Z0-9_]*\Z")
_MAX_BYTES = 400_000

#: project -> (path of its one defaults module, key path -> value) or None.
_TABLES: weakref.WeakKeyDictionary[Any, tuple[str, dict[tuple[str, ...], Any]] | None] = weakref.WeakKeyDictionary()


def yacs_value(ctx: FileContext, node: ast.AST) -> Any:
    """The default the project's yacs defaults module gives the key path ``node`` reads
    (``cfg.SOLVER.WEIGHT_DECAY``), else UNKNOWN."""
    keys: list[str] = []
    cur = node
    while isinstance(cur, ast.Attribute):
        keys.append(cur.attr)
        cur = cur.value
    # the section right under the root is upper-case (``cfg.TRAIN``); the keys below it follow the
    # project's own spelling (``cfg.TRAIN.weight_decay``) and must be a path the defaults assign
    if len(keys) < 2 or not isinstance(cur, ast.Name) or not _KEY.match(keys[-1]):
        return UNKNOWN
    view = ctx.project
    if view is None:
        return UNKNOWN
    table = _imported_table(view, cur.id)  # ``from pycls.core.config import cfg``
    if table is None:
        project = view.project
        if project not in _TABLES:
            _TABLES[project] = _defaults_table(project.root)
        table = _TABLES[project]
    if table is None:
        return UNKNOWN
    path, values = table
    value = values.get(tuple(reversed(keys)), UNKNOWN)
    if value is not UNKNOWN:
        view.dependencies.add(path)
    return value


#: module path -> its table (None: not a yacs defaults module), per content-stable process.
_MODULE_TABLES: dict[str, dict[tuple[str, ...], Any] | None] = {}


def _imported_table(view: Any, name: str) -> tuple[str, dict[tuple[str, ...], Any]] | None:
    """The table of the project module the file imports the config object ``name`` from, when
    that module is a yacs defaults module (a project with several of them: the one the file reads)."""
    target = view.bindings.get(name)
    if target is None or target[1] is None:
        return None
    path = target[0]
    digest = view.project.digest(path)
    key = f"{path}:{digest}"
    if key not in _MODULE_TABLES:
        _MODULE_TABLES[key] = _module_table(path)
    table = _MODULE_TABLES[key]
    return (path, table) if table else None


def _defaults_table(root: Path) -> tuple[str, dict[tuple[str, ...], Any]] | None:
    """The key paths the project's one yacs defaults module assigns constants to."""
    found: list[tuple[str, dict[tuple[str, ...], Any]]] = []
    base = len(root.parts)
    for folder, dirs, files in os.walk(root):
        depth = len(Path(folder).parts) - base
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIP] if depth < _DEPTH else []
        for name in files:
            if name not in _NAMES:
                continue
            path = os.path.join(folder, name)
            table = _module_table(path)
            if table:
                found.append((path, table))
    return found[0] if len(found) == 1 else None


def _module_table(path: str) -> dict[tuple[str, ...], Any] | None:
    try:
        if os.path.getsize(path) > _MAX_BYTES:
            return None
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if "CfgNode" not in text and "CN(" not in text:
        return None
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    roots = set()
    for stmt in tree.body:  # ``_C = CfgNode()`` / ``_C = CN()``
        if (
            isinstance(stmt, ast.Assign)
            and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, ast.Call)
            and (getattr(stmt.value.func, "id", None) or getattr(stmt.value.func, "attr", None)) in ("CfgNode", "CN")
        ):
            roots.add(stmt.targets[0].id)
    if len(roots) != 1:
        return None
    root = roots.pop()
    table: dict[tuple[str, ...], Any] = {}
    assigned: set[tuple[str, ...]] = set()
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            continue
        keys: list[str] = []
        cur: ast.AST = stmt.targets[0]
        while isinstance(cur, ast.Attribute):
            keys.append(cur.attr)
            cur = cur.value
        if not keys or not (isinstance(cur, ast.Name) and cur.id == root):
            continue
        key = tuple(reversed(keys))
        if key in assigned:
            table.pop(key, None)  # assigned twice: which one holds is not ours to tell
            continue
        assigned.add(key)
        value = _constant(stmt.value)
        if value is not UNKNOWN:
            table[key] = value
    return table or None


def _constant(node: ast.expr) -> Any:
    """A number, string, bool or None (``-1``, ``1e-4``), else UNKNOWN."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        value = node.operand.value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
    return UNKNOWN
