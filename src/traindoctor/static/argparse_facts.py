"""argparse defaults read back through ``args.x``: the value a script runs with by default.

``parser.add_argument("--workers", default=4)`` then ``DataLoader(..., num_workers=args.workers)``:
the rules judge the default (catalog policy: literal or default values). One
:class:`ArgparseFacts` per file, built on first use, behind ``ctx.argparse_default``.
"""

from __future__ import annotations

import ast
from functools import cached_property
from typing import Any, cast

from traindoctor.static import values as _values
from traindoctor.static.args import UNKNOWN
from traindoctor.static.protocols import ArgparseSource


class ArgparseFacts:
    """Options a file declares and the names its parsed arguments are bound to."""

    def __init__(self, ctx: ArgparseSource) -> None:
        self.ctx = ctx

    @cached_property
    def _argparse(self) -> dict[str, list[Any]]:
        """argparse dest -> defaults given in this file (``add_argument`` and ``set_defaults``)."""
        out: dict[str, list[Any]] = {}
        # While this table is being built, an ``args.x`` inside an add_argument call (e.g.
        # ``action=argparse.BooleanOptionalAction``) must not ask for the table again.
        self.__dict__["_argparse_building"] = True
        for call in self.ctx.method_calls("add_argument"):
            dest = _values.option_dest(call)
            if dest is not None:
                out.setdefault(dest, []).append(_values.option_default(self.ctx, call))
        for call in self.ctx.method_calls("set_defaults"):
            for kw in call.keywords:
                if kw.arg:
                    out[kw.arg] = [self.ctx.value(kw.value)]
        return out

    @property
    def options(self) -> dict[str, list[Any]]:
        """argparse dest -> the defaults this file declares for it (a copy)."""
        return {dest: list(defaults) for dest, defaults in self._argparse.items()}

    @property
    def reassigned(self) -> frozenset[str]:
        """Attributes the file stores on a namespace-like name (see ``_reassigned_namespace_attrs``)."""
        return self._reassigned_namespace_attrs

    @cached_property
    def parsed_args_names(self) -> frozenset[str]:
        """Names bound to the result of ``parse_args()`` / ``parse_known_args()``."""
        names: set[str] = set()
        for attr in ("parse_args", "parse_known_args"):
            for call in self.ctx.method_calls(attr):
                parent = self.ctx.parent(call)
                if isinstance(parent, ast.Subscript):
                    parent = self.ctx.parent(parent)
                if isinstance(parent, (ast.Assign, ast.AnnAssign)):
                    targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
                    for t in targets:
                        if isinstance(t, ast.Name):
                            names.add(t.id)
                        elif isinstance(t, ast.Tuple) and t.elts and isinstance(t.elts[0], ast.Name):
                            names.add(t.elts[0].id)
        return frozenset(names)

    @cached_property
    def _reassigned_namespace_attrs(self) -> frozenset[str]:
        """Attributes the file stores on a plain name (``args.workers = ...``, ``args.lr *= k``,
        ``setattr(args, "lr", v)``): such an option's argparse default is not its value."""
        out = {
            n.attr
            for n in self.ctx.of(ast.Attribute)
            if isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name) and n.value.id not in ("self", "cls")
        }
        for call in self.ctx.of(ast.Call):
            if (
                isinstance(call.func, ast.Name)
                and call.func.id == "setattr"
                and len(call.args) >= 2
                and isinstance(call.args[0], ast.Name)
                and isinstance(call.args[1], ast.Constant)
                and isinstance(call.args[1].value, str)
            ):
                out.add(call.args[1].value)
        return frozenset(out)

    def argparse_default(self, node: ast.Attribute, *, declared: bool = False) -> Any:
        """Value of ``args.x`` from this file's argparse default for ``x`` (else UNKNOWN).

        ``args`` must be bound from ``parse_args()`` or be a function parameter (the common
        ``def main(args)`` shape) and ``x`` must be an option this file declares. An option the
        file reassigns (``args.x = ...``) is UNKNOWN unless ``declared`` asks for the default the
        parser declares, whatever happens to it later.
        """
        if not isinstance(node.value, ast.Name):
            return UNKNOWN
        if self.__dict__.get("_argparse_building") and "_argparse" not in self.__dict__:
            return UNKNOWN
        defaults = self._argparse.get(node.attr)
        if not defaults or (not declared and node.attr in self._reassigned_namespace_attrs):
            return UNKNOWN  # ``args.workers = ...`` anywhere: the default no longer tells the value
        base = node.value
        if base.id not in self.parsed_args_names:
            fn = self.ctx.function_of(node)
            params = set()
            while fn is not None:
                a = cast("ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda", fn).args  # a function
                params |= {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
                fn = self.ctx.function_of(fn)
            if base.id not in params:
                return UNKNOWN
        first = defaults[0]
        if first is UNKNOWN or any(d != first for d in defaults[1:]):
            return UNKNOWN
        return first
