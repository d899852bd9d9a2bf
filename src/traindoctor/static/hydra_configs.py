"""Hyperparameters of a Hydra application are known values: its YAML config and defaults list.

::

    # conf/config.yaml                      # train.py
    defaults:                               @hydra.main(config_path="conf", config_name="config")
      - data: imagenet                      def main(cfg):
      - _self_                                  loader = build(cfg)
    batch_size: 64                          def build(cfg):
    # conf/data/imagenet.yaml                   return DataLoader(ds, num_workers=cfg.data.num_workers)
    num_workers: 0

``cfg.data.num_workers`` evaluates to 0: the primary config (``config_path``/``config_name``,
relative to the script) composed with its defaults list (``group: option`` loads
``group/option.yaml`` under the key ``group``, or at the root with ``# @package _global_``; a
plain entry loads another config at the root; the primary config's own keys apply where
``_self_`` stands, else last). A function of the same file whose every call passes the config
(or a part of it, ``build(cfg.data)``) reads it too. As with argparse defaults, a command-line
override may change a value; rules read the composed default.

Unknown stays unknown: a config path or name that is not a constant, a file the reader cannot
read, an interpolation (``${...}``), a key the composition does not hold, an option that is
``???`` (mandatory), an attribute the file stores anywhere (``cfg.x = ...``), a function that is
also called with something else or handed on as a value.
"""

from __future__ import annotations

import ast
import copy
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traindoctor.static.args import UNKNOWN
from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_MAX_DEPTH = 3
_MAX_BYTES = 200_000
_ENTRY = re.compile(r"^\s*-\s+(?P<entry>.+?)\s*$")
_PACKAGE = re.compile(r"^#\s*@package\s+(?P<package>\S+)")


def hydra_value(ctx: FileContext, node: ast.AST) -> Any:
    """The composed Hydra default ``node`` (``cfg.data.num_workers``) reads, else UNKNOWN."""
    keys: list[str] = []
    cur = node
    while isinstance(cur, (ast.Attribute, ast.Subscript)):
        if isinstance(cur, ast.Attribute):
            keys.append(cur.attr)
        elif isinstance(cur.slice, ast.Constant) and isinstance(cur.slice.value, str):
            keys.append(cur.slice.value)
        else:
            return UNKNOWN
        cur = cur.value
    if not keys or not isinstance(cur, ast.Name) or "hydra" not in ctx.source:
        return UNKNOWN
    keys.reverse()
    if _stored(ctx, keys):
        return UNKNOWN
    fn = ctx.function_of(cur)
    found = _config_of(ctx, fn, cur.id, 0)
    if found is None:
        return UNKNOWN
    value: Any = found
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return UNKNOWN
        value = value[key]
    if isinstance(value, (dict, list)) or value == "???" or (isinstance(value, str) and "${" in value):
        return UNKNOWN
    return value


def _config_of(ctx: FileContext, fn: ast.AST | None, param: str, depth: int) -> dict[str, Any] | None:
    """The composed config the parameter ``param`` of ``fn`` holds (None: unknown)."""
    if not isinstance(fn, _FUNCS) or depth > _MAX_DEPTH:
        return None
    params = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
    if param not in params:
        return None
    for deco in fn.decorator_list:
        if isinstance(deco, ast.Call) and _is_hydra_main(ctx, deco) and params and params[0] == param:
            return _primary(ctx, deco)
    if ctx.function_of(fn) is not None:
        return None  # a nested function: its callers are not all visible here
    passed: dict[str, Any] | None = None
    sites = 0
    for name in ctx.of(ast.Name):
        if name.id != fn.name:
            continue
        call = ctx.parent(name)
        if not (isinstance(call, ast.Call) and call.func is name):
            return None  # handed on as a value: called from where we cannot see
        arg = _argument(call, params, param)
        if arg is None:
            return None
        composed = _passed(ctx, arg, depth)
        if composed is None or (passed is not None and composed is not passed):
            return None
        passed, sites = composed, sites + 1
    return passed if sites else None


def _passed(ctx: FileContext, arg: ast.expr, depth: int) -> dict[str, Any] | None:
    """The part of a composed config ``arg`` (``cfg`` or ``cfg.data``) names at a call site."""
    keys: list[str] = []
    cur = arg
    while isinstance(cur, ast.Attribute):
        keys.append(cur.attr)
        cur = cur.value
    if not isinstance(cur, ast.Name):
        return None
    found = _config_of(ctx, ctx.function_of(cur), cur.id, depth + 1)
    for key in reversed(keys):
        if not isinstance(found, dict):
            return None
        nested = found.get(key)
        found = nested if isinstance(nested, dict) else None
    return found


def _argument(call: ast.Call, params: list[str], param: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == param:
            return kw.value
    index = params.index(param)
    if any(isinstance(a, ast.Starred) for a in call.args[: index + 1]):
        return None
    return call.args[index] if index < len(call.args) else None


def _is_hydra_main(ctx: FileContext, deco: ast.Call) -> bool:
    """``@hydra.main(...)`` (also as ``from hydra import main``) or a wrapper named ``hydra_main``."""
    name = ctx.qualname(deco.func) or dotted(deco.func) or ""
    return name == "hydra.main" or name.rsplit(".", 1)[-1] == "hydra_main"


def _primary(ctx: FileContext, deco: ast.Call) -> dict[str, Any] | None:
    """The composed config of ``@hydra.main(config_path=..., config_name=...)``."""
    args: dict[str, Any] = {}
    for i, field in enumerate(("config_path", "config_name")):
        if i < len(deco.args):
            args[field] = ctx.value(deco.args[i])
    for kw in deco.keywords:
        if kw.arg in ("config_path", "config_name"):
            args[kw.arg] = ctx.value(kw.value)
    path, name = args.get("config_path"), args.get("config_name")
    if not isinstance(path, str) or not isinstance(name, str):
        return None
    folder = Path(ctx.filename).resolve().parent / path
    read: list[str] = []
    composed = _compose(folder, _yaml_name(name), 0, read)
    view = ctx.project
    if view is not None:
        view.dependencies.update(read)
    return composed


def _yaml_name(name: str) -> str:
    return name if name.endswith((".yaml", ".yml")) else f"{name}.yaml"


def _read(path: Path) -> tuple[dict[str, Any], list[str]] | None:
    """A config file's own keys and its defaults list (memoised by path, size and mtime)."""
    from traindoctor.static.config_files import load_yaml

    try:
        stat = os.stat(path)
    except OSError:
        return None
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key in _READ:
        return _READ[key]
    found: tuple[dict[str, Any], list[str]] | None = None
    if stat.st_size <= _MAX_BYTES:
        try:
            text = path.read_text(encoding="utf-8")
            own = load_yaml(text)
        except Exception:
            own = None
            text = ""
        entries = _defaults_list(text)
        if isinstance(own, dict) or (own is None and text.strip() == ""):
            mapping = {k: v for k, v in (own or {}).items() if k != "defaults"}
            found = (mapping, entries) if entries is not None else None
    if len(_READ) > 512:
        _READ.clear()
    _READ[key] = found
    return found


#: (path, size, mtime) -> (own keys, defaults list) of config files read in this process.
_READ: dict[tuple[str, int, int], tuple[dict[str, Any], list[str]] | None] = {}


def _compose(folder: Path, relative: str, depth: int, read: list[str]) -> dict[str, Any] | None:
    """A config file with its defaults list applied (None: unreadable)."""
    path = folder / relative
    if depth > _MAX_DEPTH:
        return None
    read.append(str(path))
    found = _read(path)
    if found is None:
        return None
    own, entries = found
    own = copy.deepcopy(own)
    entries = list(entries)
    if "_self_" not in entries:
        entries.append("_self_")
    out: dict[str, Any] = {}
    for entry in entries:
        if entry == "_self_":
            _merge(out, own)
            continue
        group, _, option = entry.partition(":")
        group, option = group.strip(), option.strip()
        for prefix in ("override ", "optional "):
            group = group.removeprefix(prefix)
        group = group.strip().lstrip("/")
        if group.startswith("hydra") or option in ("null", "~"):
            continue
        if not option:  # another config of this folder, at the root
            part = _compose(folder, _yaml_name(group), depth + 1, read)
            if part is None:
                return None
            _merge(out, part)
            continue
        group, _, package = group.partition("@")
        part = _compose(folder / group, _yaml_name(option), depth + 1, read)
        if part is None:
            return None
        where = _package(folder / group / _yaml_name(option), package or group)
        target = out
        for key in where:
            target = target.setdefault(key, {})
            if not isinstance(target, dict):
                return None
        _merge(target, part)
    return out


def _package(path: Path, default: str) -> list[str]:
    """Where a group option's keys go: its ``# @package`` header, else the group's path."""
    try:
        with path.open(encoding="utf-8") as handle:
            first = handle.readline()
    except OSError:
        first = ""
    match = _PACKAGE.match(first.strip())
    package = match.group("package") if match else default
    if package == "_global_":
        return []
    return [p for p in package.replace("/", ".").split(".") if p and p != "_group_"]


def _defaults_list(text: str) -> list[str] | None:
    """The entries of a config's top-level ``defaults:`` list (``group: option``, ``_self_``, a name)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.rstrip() == "defaults:" or line.startswith("defaults:"):
            rest = line.split(":", 1)[1].strip()
            if rest and rest != "[]":
                return None  # a flow list: not read
            entries = []
            for item in lines[i + 1 :]:
                if not item.strip() or item.lstrip().startswith("#"):
                    continue
                if not item.startswith((" ", "-")):
                    break
                match = _ENTRY.match(item.split(" #", 1)[0])
                if match is None:
                    return None
                entries.append(match.group("entry").strip("\"'"))
            return entries
    return []


def _merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _stored(ctx: FileContext, keys: list[str]) -> bool:
    """Whether the file may change the key path ``keys``: it stores an attribute called like its
    last key anywhere, or ``setattr``s that name (or a computed name on an object named like one
    of the other keys)."""
    attr = keys[-1]
    for node in ctx.of(ast.Attribute):
        if node.attr == attr and isinstance(node.ctx, ast.Store):
            return True
    for call in ctx.of(ast.Call):
        if not (isinstance(call.func, ast.Name) and call.func.id == "setattr" and len(call.args) >= 2):
            continue
        name = call.args[1]
        if isinstance(name, ast.Constant):
            if name.value == attr:
                return True
        elif (dotted(call.args[0]) or "").rsplit(".", 1)[-1] in keys[:-1] or not isinstance(
            call.args[0], ast.Attribute
        ):
            return True
    return False
