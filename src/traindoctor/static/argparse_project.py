"""argparse options declared in another module of the project are known values too.

The parser often lives apart from the script that uses it::

    # opts.py                                   # options/base_options.py (pix2pix/SPADE style)
    def get_args_parser():                      class BaseOptions:
        parser = argparse.ArgumentParser()          def initialize(self, parser):
        parser.add_argument("--workers", default=0)     parser.add_argument("--nThreads", default=4)
        return parser                               def parse(self):
                                                        ...
    # train.py                                          return parser.parse_args()
    args = get_args_parser().parse_args()       opt = TrainOptions().parse()
    DataLoader(ds, num_workers=args.workers)    DataLoader(ds, num_workers=opt.nThreads)

``args.workers`` evaluates to the default the project declares for ``--workers``, as a default
declared in the same file does (see :mod:`.argparse_facts`). The modules that declare the parser
are found from what ``args`` is bound to: ``X.parse_args()`` / ``parse_known_args()[0]`` /
``X.parse()`` where ``X`` is a project function's parser, a project class's instance (its
project base classes too) or an ``ArgumentParser(parents=[...])`` of this file; or a call of a
project function that parses and returns the namespace (``args = parse_args()``).

Unknown stays unknown: a binding of another shape, an option no module declares or declares with
two defaults, an attribute this file or a declaring module stores on a namespace
(``opt.isTrain = ...``).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any

from traindoctor.static.args import UNKNOWN

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

_PARSES = frozenset({"parse_args", "parse_known_args", "parse", "parse_args_and_config"})
_MAX_MODULES = 8


def project_option_value(ctx: FileContext, node: ast.AST) -> Any:
    """The default the project declares for the option ``node`` (``args.workers``) reads, else UNKNOWN."""
    if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
        return UNKNOWN
    if node.value.id in ("self", "cls") or node.attr in ctx.namespace_stores:
        return UNKNOWN
    bound = ctx.bindings_of(node.value)
    if not bound:
        return UNKNOWN
    if bound == [None]:
        bound = _known_args_parse(ctx, node.value)
    modules: list[FileContext] = []
    for expr in bound:
        found = _declaring_modules(ctx, expr)
        if found is None:
            return UNKNOWN
        modules += [m for m in found if all(m is not k for k in modules)]
    if not modules or len(modules) > _MAX_MODULES:
        return UNKNOWN
    defaults: list[Any] = []
    for module in modules:
        if node.attr in module.namespace_stores and module is not ctx:
            return UNKNOWN  # the parsing code changes it after parsing
        defaults += module.argparse_options.get(node.attr, [])
    if not defaults:
        return UNKNOWN
    first = defaults[0]
    if first is UNKNOWN or any(d != first or type(d) is not type(first) for d in defaults[1:]):
        return UNKNOWN
    return first


def _known_args_parse(ctx: FileContext, name: ast.Name) -> list[ast.expr | None]:
    """``args, rest = parser.parse_known_args()``: the parse whose first element ``name`` binds."""
    scope = ctx.scope_of(name)
    for assign in ctx.of(ast.Assign):
        target = assign.targets[0] if len(assign.targets) == 1 else None
        value = assign.value
        if (
            isinstance(target, ast.Tuple)
            and target.elts
            and isinstance(target.elts[0], ast.Name)
            and target.elts[0].id == name.id
            and ctx.scope_of(assign) is scope
            and isinstance(value, ast.Call)
            and isinstance(value.func, ast.Attribute)
            and value.func.attr == "parse_known_args"
        ):
            return [value]
    return [None]


def _declaring_modules(ctx: FileContext, expr: ast.expr | None) -> list[FileContext] | None:
    """The modules whose ``add_argument`` calls declare the namespace ``expr`` evaluates to."""
    if isinstance(expr, ast.Subscript):  # ``parser.parse_known_args()[0]``
        expr = expr.value
    if not isinstance(expr, ast.Call):
        return None
    func = expr.func
    if isinstance(func, ast.Attribute) and func.attr in _PARSES:
        return _parser_modules(ctx, func.value)
    found = _project_modules(ctx, func)  # ``args = parse_args()`` of a project module
    if found is None:
        return None
    return found


def _parser_modules(ctx: FileContext, parser: ast.expr) -> list[FileContext] | None:
    """The modules declaring the options of ``parser`` (what ``.parse_args()`` is called on)."""
    if isinstance(parser, ast.Name):
        bound = ctx.binding(parser)
        if bound is None:
            return None
        parser = bound
    if not isinstance(parser, ast.Call):
        return None
    qualname = ctx.qualname(parser.func) or ""
    if qualname.endswith("ArgumentParser"):
        modules = [ctx]
        for kw in parser.keywords:
            if kw.arg == "parents" and isinstance(kw.value, (ast.List, ast.Tuple)):
                for parent in kw.value.elts:
                    if not isinstance(parent, ast.Call):
                        return None
                    found = _project_modules(ctx, parent.func)
                    if found is None:
                        return None
                    modules += found
        return modules
    return _project_modules(ctx, parser.func)


def _project_modules(ctx: FileContext, func: ast.expr) -> list[FileContext] | None:
    """The module defining the project function or class ``func`` names (``Options().parse``'s
    class: with the modules of its project base classes), as parsed contexts."""
    from traindoctor.static.class_configs import resolve_class

    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
        func = func.value.func  # ``TrainOptions().parse`` -> ``TrainOptions``
    if isinstance(func, ast.Name) and func.id not in ctx.imports.names:
        local = [
            s
            for s in ctx.tree.body
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and s.name == func.id
        ]
        return [ctx] if len(local) == 1 else None
    cls = resolve_class(ctx, func)
    if cls is not None:
        modules = [cls.ctx]
        bases = [(cls.ctx, b) for b in cls.node.bases]
        seen = 0
        while bases and seen < _MAX_MODULES:
            seen += 1
            where, base = bases.pop()
            parent = resolve_class(where, base)
            if parent is not None:
                if all(parent.ctx is not m for m in modules):
                    modules.append(parent.ctx)
                bases += [(parent.ctx, b) for b in parent.node.bases]
        return modules
    view = ctx.project
    if view is None:
        return None
    resolved = view.resolve(func)
    if resolved is None or resolved.function is None or resolved.summary is None:
        return None
    other = view.project.module_context(resolved.summary)
    return [other] if other is not None else None
