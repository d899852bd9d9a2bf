"""Hyperparameters kept as the class-level defaults of a config class are known values.

Many training scripts keep their settings in a class instead of an argparse parser::

    @dataclass
    class TrainConfig:                      # or a Tap (typed-argument-parser) class, or a plain
        num_workers: int = 0                # ``class Config: num_workers = 8`` with ``opt = Config()``
        optim: OptimConfig = field(default_factory=OptimConfig)

    cfg = TrainConfig()                     # or ``cfg: TrainConfig = load()``, ``def main(cfg: TrainConfig)``,
    DataLoader(ds, num_workers=cfg.num_workers)   # ``HfArgumentParser((A, B)).parse_args_into_dataclasses()``

A read such as ``cfg.num_workers`` or ``cfg.optim.weight_decay`` evaluates to the default the
class declares, as the default of an argparse option does (a command line or a config file may
still override it: rules read a default as the value a run gets unless told otherwise). The class
may be defined in the same file or in another project module, with its project base classes.

Unknown stays unknown: a name bound to anything but a construction of one class (a helper's
result, ``replace(cfg, ...)``, two classes), a constructor call with ``*args``/``**kwargs`` or
positional arguments, an attribute the file sets on the instance (``cfg.x = ...``), an attribute
a method of the class assigns (``__post_init__``, ``process_args``), an attribute the class
chain does not declare while a base lies outside the project, a non-constant default.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traindoctor.static.args import UNKNOWN
from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
#: Methods of ``HfArgumentParser`` that return one instance per dataclass it was given, in order.
_HF_PARSES = frozenset({"parse_args_into_dataclasses", "parse_json_file", "parse_yaml_file", "parse_dict"})
_MAX_DEPTH = 4


@dataclass(frozen=True)
class ConfigClass:
    """A config class as the file that uses it sees it: its definition and the context it lives in."""

    node: ast.ClassDef
    ctx: FileContext


@dataclass(frozen=True)
class Default:
    """What a class chain declares for one attribute: a constant, or a nested config class."""

    value: Any = UNKNOWN
    nested: ConfigClass | None = None


def class_config_value(ctx: FileContext, node: ast.AST) -> Any:
    """The class-level default ``node`` (``cfg.a`` or ``cfg.a.b``) reads, else UNKNOWN."""
    if not isinstance(node, ast.Attribute):
        return UNKNOWN
    chain: list[str] = []
    cur: ast.AST = node
    while isinstance(cur, ast.Attribute):
        chain.append(cur.attr)
        cur = cur.value
    if not isinstance(cur, ast.Name) or len(chain) > _MAX_DEPTH or cur.id in ("self", "cls"):
        return UNKNOWN
    chain.reverse()
    if _set_on_instance(ctx, cur.id, chain[0]):
        return UNKNOWN
    found = instance_of(ctx, cur)
    if found is None:
        return UNKNOWN
    cls, passed = found
    first = chain[0]
    if first in passed:
        if len(chain) > 1:
            return UNKNOWN
        return passed[first]
    for attr in chain[:-1]:
        default = declared(cls, attr)
        if default is None or default.nested is None:
            return UNKNOWN
        cls = default.nested
    default = declared(cls, chain[-1])
    return default.value if default is not None and default.nested is None else UNKNOWN


def instance_of(ctx: FileContext, name: ast.Name) -> tuple[ConfigClass, dict[str, Any]] | None:
    """The config class ``name`` holds an instance of, and the attributes its construction passes
    (keyword -> value, UNKNOWN when not readable); None when it cannot be told."""
    annotated = _annotation_of(ctx, name)
    if annotated is not None:
        cls = resolve_class(ctx, annotated)
        return (cls, {}) if cls is not None else None
    bound = ctx.bindings_of(name)
    if bound is None:
        cls = resolve_class(ctx, name)  # the class itself: ``Config.lr``
        if cls is not None:
            return cls, {}
        return _imported_instance(ctx, name)
    if not bound:
        return None
    found: ConfigClass | None = None
    passed: dict[str, Any] = {}
    for expr in bound:
        one = _constructed(ctx, name, expr)
        if one is None:
            return None
        cls, kwargs = one
        if found is not None and (cls.node is not found.node or kwargs or passed):
            return None  # two classes, or two constructions with their own arguments
        found, passed = cls, kwargs
    return (found, passed) if found is not None else None


def _imported_instance(ctx: FileContext, name: ast.Name) -> tuple[ConfigClass, dict[str, Any]] | None:
    """``from utils.config import opt`` where that module binds ``opt = Config()`` once at top level."""
    view = ctx.project
    if view is None or name.id not in view.bindings:
        return None
    path, attr = view.bindings[name.id]
    summary = view.summary(path) if attr is not None else None
    other = view.project.module_context(summary) if summary is not None else None
    if other is None:
        return None
    values = [
        stmt.value
        for stmt in other.tree.body
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in stmt.targets)
    ]
    if len(values) != 1 or _set_anywhere(other, attr or ""):
        return None
    return _constructed(other, name, values[0])


def _constructed(ctx: FileContext, name: ast.Name, expr: ast.expr | None) -> tuple[ConfigClass, dict[str, Any]] | None:
    """What one binding of ``name`` constructs: ``Config(...)``, or an element of a
    ``HfArgumentParser((A, B)).parse_args_into_dataclasses()`` tuple."""
    if expr is None:
        return _parsed_dataclass(ctx, name)
    if not isinstance(expr, ast.Call):
        return None
    cls = resolve_class(ctx, expr.func)
    if cls is None:
        return None
    if expr.args:
        return None  # positional fields: which is which needs the field order
    kwargs: dict[str, Any] = {}
    for kw in expr.keywords:
        if kw.arg is None:
            return None  # ``Config(**overrides)``
        kwargs[kw.arg] = ctx.value(kw.value)
    return cls, kwargs


def _parsed_dataclass(ctx: FileContext, name: ast.Name) -> tuple[ConfigClass, dict[str, Any]] | None:
    """``a, b = parser.parse_args_into_dataclasses()`` with ``parser = HfArgumentParser((A, B))``:
    the class at ``name``'s position."""
    scope = ctx.scope_of(name)
    found: ConfigClass | None = None
    for assign in ctx.of(ast.Assign):
        if ctx.scope_of(assign) is not scope or len(assign.targets) != 1:
            continue
        target = assign.targets[0]
        if not isinstance(target, (ast.Tuple, ast.List)):
            continue
        names = [t.id if isinstance(t, ast.Name) else None for t in target.elts]
        if name.id not in names:
            continue
        classes = hf_parse_classes(ctx, assign.value)
        index = names.index(name.id)
        if classes is None or index >= len(classes):
            return None
        cls = resolve_class(ctx, classes[index])
        if cls is None or (found is not None and cls.node is not found.node):
            return None
        found = cls
    return (found, {}) if found is not None else None


def hf_parse_classes(ctx: FileContext, value: ast.expr, files_too: bool = True) -> list[ast.expr] | None:
    """The dataclasses of ``parser.parse_args_into_dataclasses()`` (``parser`` bound once to
    ``HfArgumentParser((A, B, C))``), in order; None when it is not that shape. ``files_too``:
    also ``parse_json_file``/``parse_yaml_file``/``parse_dict`` (values from a file: defaults are
    what a field holds when the file leaves it out)."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return None
    if value.func.attr not in _HF_PARSES or (files_too is False and value.func.attr != "parse_args_into_dataclasses"):
        return None
    parser: ast.expr | None = value.func.value
    if isinstance(parser, ast.Name):
        parser = ctx.binding(parser)
    if not (isinstance(parser, ast.Call) and parser.args):
        return None
    qualname = ctx.qualname(parser.func) or dotted(parser.func) or ""
    if not qualname.endswith("HfArgumentParser"):
        return None
    first = parser.args[0]
    if isinstance(first, (ast.Tuple, ast.List)):
        return list(first.elts)
    return [first]


def _annotation_of(ctx: FileContext, name: ast.Name) -> ast.expr | None:
    """The class ``name`` is annotated with: ``cfg: Config = ...`` in its scope, or a parameter
    ``def main(cfg: Config)`` of the function that binds it."""
    scope = ctx.scope_of(name)
    for ann in ctx.of(ast.AnnAssign):
        if isinstance(ann.target, ast.Name) and ann.target.id == name.id and ctx.scope_of(ann) is scope:
            return _class_expr(ann.annotation)
    fn: ast.AST | None = scope
    while isinstance(fn, (*_FUNCS, ast.Lambda)):
        a = fn.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs]:
            if arg.arg == name.id:
                return _class_expr(arg.annotation) if arg.annotation is not None else None
        if any(
            isinstance(t, ast.Name) and t.id == name.id
            for node in ast.walk(fn)
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
        ):
            return None  # bound in this function: its bindings decide
        fn = ctx.function_of(fn)
    return None


def _class_expr(annotation: ast.expr | None) -> ast.expr | None:
    """``Config``, ``cfgs.Config`` or ``"Config"``: an annotation that names one class."""
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            parsed = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return None
        return parsed if isinstance(parsed, (ast.Name, ast.Attribute)) else None
    return annotation if isinstance(annotation, (ast.Name, ast.Attribute)) else None


def resolve_class(ctx: FileContext, expr: ast.AST) -> ConfigClass | None:
    """The class definition ``expr`` names: a top-level class of this file or of a project module."""
    if isinstance(expr, ast.Name) and expr.id not in ctx.imports.names:
        for stmt in ctx.tree.body:
            if isinstance(stmt, ast.ClassDef) and stmt.name == expr.id:
                return ConfigClass(stmt, ctx)
        return None
    view = ctx.project
    if view is None:
        return None
    resolved = view.resolve(expr)
    if resolved is None or resolved.cls is None or resolved.summary is None:
        return None
    other = view.project.module_context(resolved.summary)
    if other is None:
        return None
    for stmt in other.tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name == resolved.name:
            return ConfigClass(stmt, other)
    return None


def declared(cls: ConfigClass, attr: str, depth: int = 0) -> Default | None:
    """What the class chain of ``cls`` declares for ``attr`` (None: nothing known)."""
    if depth > _MAX_DEPTH or _assigned_in_methods(cls.node, attr):
        return None
    for stmt in cls.node.body:
        target: ast.expr | None = None
        value: ast.expr | None = None
        annotation: ast.expr | None = None
        if isinstance(stmt, ast.AnnAssign):
            target, value, annotation = stmt.target, stmt.value, stmt.annotation
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        if not (isinstance(target, ast.Name) and target.id == attr):
            continue
        if value is None:
            return None  # a required field: the run must give it
        return _default_of(cls, value, annotation)
    for base in cls.node.bases:
        if dotted(base) == "object":
            continue
        parent = resolve_class(cls.ctx, base)
        if parent is None:
            return None  # a base outside the project may declare it
        found = declared(parent, attr, depth + 1)
        if found is not None:
            return found
    return None


def declares(cls: ConfigClass, attr: str, depth: int = 0) -> bool:
    """Whether the project part of the class chain of ``cls`` names ``attr`` at all (a field, a
    class attribute, or an assignment in a method): when it does not, an outside base decides."""
    if depth > _MAX_DEPTH:
        return False
    if _assigned_in_methods(cls.node, attr):
        return True
    for stmt in cls.node.body:
        target: ast.expr | None = stmt.target if isinstance(stmt, ast.AnnAssign) else None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
        if isinstance(target, ast.Name) and target.id == attr:
            return True
    for base in cls.node.bases:
        parent = resolve_class(cls.ctx, base)
        if parent is not None and declares(parent, attr, depth + 1):
            return True
    return False


def _default_of(cls: ConfigClass, value: ast.expr, annotation: ast.expr | None) -> Default | None:
    """A field's default: ``= 4``, ``= field(default=4)``, ``= field(default_factory=Sub)``, ``= Sub()``."""
    ctx = cls.ctx
    if isinstance(value, ast.Call):
        callee = dotted(value.func) or ""
        if callee.rsplit(".", 1)[-1] == "field":
            for kw in value.keywords:
                if kw.arg == "default":
                    return Default(ctx.value(kw.value))
                if kw.arg == "default_factory":
                    nested = resolve_class(ctx, kw.value)
                    return Default(nested=nested) if nested is not None else None
            return None
        nested = resolve_class(ctx, value.func)
        if nested is not None:
            return Default(nested=nested) if not value.args and not value.keywords else None
    found = ctx.value(value)
    return Default(found) if found is not UNKNOWN else None


def _assigned_in_methods(node: ast.ClassDef, attr: str) -> bool:
    """Whether a method of the class assigns ``self.<attr>`` (``__post_init__``, ``process_args``)."""
    for stmt in node.body:
        if not isinstance(stmt, _FUNCS):
            continue
        for sub in ast.walk(stmt):
            targets: list[ast.expr] = []
            if isinstance(sub, ast.Assign):
                targets = sub.targets
            elif isinstance(sub, (ast.AugAssign, ast.AnnAssign)):
                targets = [sub.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name):
                    return True
    return False


def _set_anywhere(ctx: FileContext, name: str) -> bool:
    """Whether the module sets any attribute of its ``name`` (``opt.lr = ...``) or passes it to ``setattr``."""
    return any(
        isinstance(node.ctx, ast.Store) and isinstance(node.value, ast.Name) and node.value.id == name
        for node in ctx.of(ast.Attribute)
    )


def _set_on_instance(ctx: FileContext, name: str, attr: str) -> bool:
    """Whether the file sets ``<name>.<attr>`` anywhere (``cfg.lr = ...``, ``setattr(cfg, "lr", ...)``)."""
    for node in ctx.of(ast.Attribute):
        if (
            node.attr == attr
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id == name
        ):
            return True
    for call in ctx.of(ast.Call):
        if isinstance(call.func, ast.Name) and call.func.id == "setattr" and call.args:
            first = call.args[0]
            if isinstance(first, ast.Name) and first.id == name:
                return True
    return False
