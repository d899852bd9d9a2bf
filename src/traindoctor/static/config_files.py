"""Hyperparameters read from the project's own YAML/JSON/TOML files are known values.

Many scripts keep their batch size and worker count in a config file::

    with open("configs/train.yaml") as f:
        cfg = EasyDict(yaml.safe_load(f))
    DataLoader(ds, batch_size=cfg.train.batch_size, num_workers=cfg.num_workers)

When the script loads a file by a literal path, or by the default of an argparse option
(``--config configs/train.yaml``), and that file lies inside the project, a read such as
``cfg.train.batch_size`` or ``cfg["train"]["batch_size"]`` evaluates to the file's value. Unknown
stays unknown: a path that names no file (or two candidate files), a config changed in place by
the script (``cfg.update(...)``, ``cfg.lr = ...``), a key the file does not hold, or a YAML
construct the small reader below does not understand all give UNKNOWN.

YAML needs no dependency: PyYAML's ``safe_load`` is used when it is importable, else a reader for
the subset training configs use (nested mappings of plain scalars; lists, anchors, flow
collections and block scalars make their key unknown). Nothing here executes code.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from traindoctor.static.args import UNKNOWN
from traindoctor.static.names import dotted, receiver

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: Loader callables that read a file object (or path) -> format.
_FILE_LOADERS = {
    "yaml.safe_load": "yaml",
    "yaml.load": "yaml",
    "yaml.full_load": "yaml",
    "yaml.unsafe_load": "yaml",
    "json.load": "json",
    "tomllib.load": "toml",
    "tomli.load": "toml",
    "toml.load": "toml",
    "omegaconf.OmegaConf.load": "yaml",
}
#: Loader callables that parse a string read from a file (``json.loads(f.read())``).
_TEXT_LOADERS = {"json.loads": "json", "tomllib.loads": "toml", "tomli.loads": "toml", "toml.loads": "toml"}
#: Wrappers that give a dict attribute access without changing its content.
_WRAPPERS = frozenset(
    {
        "AttrDict",
        "EasyDict",
        "edict",
        "DotMap",
        "Munch",
        "munchify",
        "Box",
        "ConfigDict",
        "DictConfig",
        "SimpleNamespace",
        "create",
        "dict",
        "Namespace",
    }
)
_MAX_BYTES = 1_000_000


def config_value(ctx: FileContext, node: ast.AST) -> Any:
    """The value ``node`` (``cfg.train.batch_size``, ``cfg["lr"]``) reads from a loaded config file."""
    keys: list[str] = []
    cur = node
    while True:
        if isinstance(cur, ast.Attribute):
            keys.append(cur.attr)
            cur = cur.value
        elif (
            isinstance(cur, ast.Subscript) and isinstance(cur.slice, ast.Constant) and isinstance(cur.slice.value, str)
        ):
            keys.append(cur.slice.value)
            cur = cur.value
        elif (
            isinstance(cur, ast.Call)
            and isinstance(cur.func, ast.Attribute)
            and cur.func.attr == "get"
            and len(cur.args) == 1
            and isinstance(cur.args[0], ast.Constant)
            and isinstance(cur.args[0].value, str)
        ):
            keys.append(cur.args[0].value)
            cur = cur.func.value
        else:
            break
    if not isinstance(cur, ast.Name) or not keys:
        return UNKNOWN
    table = ctx.shared("config_files", _ConfigTable)
    if not table.loads or cur.id in table.changed:
        return UNKNOWN
    loaded = table.loaded(cur, 0)
    if loaded is None:
        return UNKNOWN
    data, path = loaded
    for key in reversed(keys):
        if not isinstance(data, dict) or key not in data:
            return UNKNOWN
        data = data[key]
    if data is UNKNOWN or isinstance(data, (dict, list)):
        return UNKNOWN
    view = ctx.project
    if view is not None:
        view.dependencies.add(path)
    return data


class _ConfigTable:
    """Per-file: the config loads it makes, and names it changes in place."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.loads = [c for q in (*_FILE_LOADERS, *_TEXT_LOADERS) for c in ctx.calls_to(q)]
        self.changed: set[str] = set()
        if not self.loads:
            return
        self.changed = set(ctx.mutated_names)
        for target in (*ctx.of(ast.Attribute), *ctx.of(ast.Subscript)):  # ``cfg.a = ``, ``cfg["a"] = ``
            if isinstance(target.ctx, (ast.Store, ast.Del)):
                root = target.value
                while isinstance(root, (ast.Attribute, ast.Subscript)):
                    root = root.value
                if isinstance(root, ast.Name):
                    self.changed.add(root.id)
        for attr in ("merge_from_file", "merge_from_list", "merge_with", "update", "setdefault"):
            for call in ctx.method_calls(attr):
                root = receiver(call)
                while isinstance(root, (ast.Attribute, ast.Subscript)):
                    root = root.value
                if isinstance(root, ast.Name):
                    self.changed.add(root.id)
        self._files: dict[str, Any] = {}

    def loaded(self, expr: ast.AST, depth: int) -> tuple[Any, str] | None:
        """(parsed content, path) when ``expr`` evaluates to a config file the script loads."""
        ctx = self.ctx
        if depth > 6:
            return None
        if isinstance(expr, ast.Name):
            bound = ctx.bindings_of(expr)
            if not bound or len(bound) != 1 or bound[0] is None:
                return None
            return self.loaded(bound[0], depth + 1)
        if not isinstance(expr, ast.Call):
            return None
        qn = ctx.qualname(expr.func) or ""
        if qn in _FILE_LOADERS and expr.args:
            path = self._path_of_file(expr.args[0])
            return self._read(path, _FILE_LOADERS[qn]) if path else None
        if qn in _TEXT_LOADERS and expr.args:
            path = self._path_of_text(expr.args[0], depth)
            return self._read(path, _TEXT_LOADERS[qn]) if path else None
        leaf = (dotted(expr.func) or "").rsplit(".", 1)[-1]
        if leaf in _WRAPPERS:
            inner = [a for a in expr.args] + [k.value for k in expr.keywords if k.arg is None]
            if len(inner) == 1 and not [k for k in expr.keywords if k.arg is not None]:
                arg = inner[0]
                return self.loaded(arg.value if isinstance(arg, ast.Starred) else arg, depth + 1)
        return None

    def _path_of_file(self, expr: ast.AST) -> str | None:
        """The path a file argument names: ``open(P)``, ``f`` from ``with open(P) as f``, or P."""
        ctx = self.ctx
        if isinstance(expr, ast.Name):
            for w in ctx.of(ast.With, ast.AsyncWith):
                for item in w.items:
                    if (
                        isinstance(item.optional_vars, ast.Name)
                        and item.optional_vars.id == expr.id
                        and ctx.within(expr, w)
                    ):
                        return self._path_of_file(item.context_expr)
            bound = ctx.bindings_of(expr)
            if bound and len(bound) == 1 and bound[0] is not None:
                return self._path_of_file(bound[0])
            return None
        if isinstance(expr, ast.Call):
            func = expr.func
            if isinstance(func, ast.Name) and func.id == "open" and expr.args:
                return self._path_value(expr.args[0])
            if isinstance(func, ast.Attribute) and func.attr == "open" and isinstance(func.value, ast.Call):
                return self._path_of_file(func.value)  # Path(P).open()
            if (ctx.qualname(func) or "").endswith("Path") and len(expr.args) == 1:
                return self._path_value(expr.args[0])
            return None
        return self._path_value(expr)

    def _path_of_text(self, expr: ast.AST, depth: int) -> str | None:
        """The file a string came from: ``f.read()`` / ``Path(P).read_text()`` (through a name)."""
        ctx = self.ctx
        if isinstance(expr, ast.Name):
            bound = ctx.bindings_of(expr)
            if not bound or len(bound) != 1 or bound[0] is None or depth > 6:
                return None
            return self._path_of_text(bound[0], depth + 1)
        if (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and expr.func.attr in ("read", "read_text")
        ):
            return self._path_of_file(expr.func.value)
        return None

    def _path_value(self, expr: ast.AST) -> str | None:
        value = self.ctx.value(expr)
        return value if isinstance(value, str) and value else None

    def _read(self, name: str, fmt: str) -> tuple[Any, str] | None:
        path = _find(self.ctx, name)
        if path is None:
            return None
        if path not in self._files:
            self._files[path] = _parse(path, fmt)
        data = self._files[path]
        return None if data is None else (data, path)


def _find(ctx: FileContext, name: str) -> str | None:
    """The one project file a relative config path can name (script folder or project root)."""
    view = ctx.project
    if view is None:
        return None
    here = view.path.parent
    root = view.project.root
    candidates = [Path(name)] if Path(name).is_absolute() else [here / name, root / name]
    found = {str(p.resolve()) for p in candidates if p.is_file()}
    if len(found) != 1:
        return None
    path = found.pop()
    try:
        Path(path).relative_to(root)
    except ValueError:
        try:
            Path(path).relative_to(here)
        except ValueError:
            return None  # outside the project: the outside world
    return path


def _parse(path: str, fmt: str) -> Any:
    try:
        data = Path(path).read_bytes()
        if len(data) > _MAX_BYTES:
            return None
        text = data.decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None
    try:
        if fmt == "json" or path.endswith(".json"):
            return json.loads(text)
        if fmt == "toml" or path.endswith(".toml"):
            if sys.version_info >= (3, 11):
                import tomllib

                return tomllib.loads(text)
            return None  # ``tomllib`` is new in Python 3.11: TOML files are read from 3.11 on
        return load_yaml(text)
    except Exception:
        return None


def load_yaml(text: str) -> Any:
    """YAML through PyYAML's ``safe_load`` when installed, else :func:`simple_yaml`."""
    try:
        import yaml
    except ImportError:
        return simple_yaml(text)
    return yaml.safe_load(text)


_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][\w.\-]*|\"[^\"]*\"|'[^']*')\s*:(?:\s+(?P<value>.*?))?\s*$")
_INT = re.compile(r"^[-+]?(0|[1-9][\d_]*)$")
_FLOAT = re.compile(r"^[-+]?(\d[\d_]*\.\d*|\.\d+|\d[\d_]*)([eE][-+]?\d+)?$")


def simple_yaml(text: str) -> dict[str, Any] | None:
    """Nested ``key: value`` mappings of plain scalars (the shape of most training configs).

    A key whose value is a list, a flow collection, an anchor/alias, a tag or a block scalar is
    UNKNOWN (reading it gives UNKNOWN, never a guess); a document this reader cannot follow at all
    (multiple documents, tabs, top-level lists) is None.
    """
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    last: tuple[int, dict[str, Any], str] | None = None
    for raw in text.splitlines():
        line = _strip_comment(raw).rstrip()
        if not line.strip() or (line.strip() == "---" and not root):
            continue
        if "\t" in line[: len(line) - len(line.lstrip())] or line.strip() in ("---", "..."):
            return None
        indent = len(line) - len(line.lstrip())
        stripped = line.strip()
        if stripped.startswith("- ") or stripped == "-":
            if last is None or indent < last[0]:
                return None
            last[1][last[2]] = UNKNOWN  # a list: not read
            continue
        match = _KEY.match(line)
        if match is None:
            if last is not None and indent > last[0]:
                last[1][last[2]] = UNKNOWN  # continuation of something we do not read
                continue
            return None
        while stack and indent <= stack[-1][0]:
            stack.pop()
        if not stack:
            return None
        parent = stack[-1][1]
        key = match.group("key").strip("\"'")
        value = match.group("value")
        if value is None or value == "":
            child: dict[str, Any] = {}
            parent[key] = child
            stack.append((indent, child))
            last = (indent, parent, key)
        else:
            parent[key] = _scalar(value)
            last = (indent, parent, key)
    return root


def _strip_comment(line: str) -> str:
    quote = None
    for i, ch in enumerate(line):
        if ch in "\"'" and quote is None:
            quote = ch
        elif ch == quote:
            quote = None
        elif ch == "#" and quote is None and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def _scalar(text: str) -> Any:
    if text[0] in "[{&*!|>%@`":
        return UNKNOWN
    if text[0] in "\"'":
        if len(text) >= 2 and text[-1] == text[0]:
            return text[1:-1] if text[0] == "'" or "\\" not in text else UNKNOWN
        return UNKNOWN
    low = text.lower()
    if low in ("true", "yes", "on"):
        return True if low == "true" else UNKNOWN  # YAML 1.1 spellings differ between readers
    if low in ("false", "no", "off"):
        return False if low == "false" else UNKNOWN
    if low in ("null", "~"):
        return None
    if _INT.match(text):
        return int(text.replace("_", ""))
    if _FLOAT.match(text) and any(c in text for c in ".eE"):
        if "e" in low:
            return UNKNOWN  # ``1e-4`` is a string to PyYAML (YAML 1.1) but a float to others
        try:
            return float(text.replace("_", ""))
        except ValueError:
            return UNKNOWN
    if text.startswith(("0x", "0o", "0b", ".inf", "-.inf", ".nan")):
        return UNKNOWN
    if ": " in text or text.endswith(":"):
        return UNKNOWN
    return text
