"""The answer to the project model's :data:`~traindoctor.facts.checkpoint.static.project.CHECKPOINT_SAVES`
question: what a top-level function (or each method of a top-level class) of a project module
saves, read from that module's own checkpoint index. The engine hands :data:`CHECKPOINT_SAVES_QUERY`
to the project model.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from traindoctor.facts.checkpoint.static.index import checkpoint_index
from traindoctor.facts.checkpoint.static.project import CHECKPOINT_SAVES, ClassSaves, SaveHelper
from traindoctor.static.vocab import MODEL, OPTIMIZER, SCALER, SCHEDULER

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import FuncDef

#: The states a summary records by key, besides the weights.
_STATE_KINDS = (MODEL, OPTIMIZER, SCHEDULER, SCALER)


def save_helper(ctx: FileContext, fn: FuncDef) -> SaveHelper | None:
    """The :class:`SaveHelper` of the function ``fn`` of ``ctx``'s file (None: it saves nothing)."""
    from traindoctor.static.project import place_of

    idx = checkpoint_index(ctx)
    a = fn.args
    positional = tuple(p.arg for p in [*a.posonlyargs, *a.args])
    keyword_only = tuple(p.arg for p in a.kwonlyargs)
    params = set(positional) | set(keyword_only)
    saves_params: list[str] = []
    path_param: str | None = None
    written: dict[str, str] = {}
    first: ast.Call | None = None
    for call, obj, path in idx.saves.save_calls:
        if ctx.function_of(call) is not fn or _in_memory(ctx, path):
            continue
        first = first or call
        if isinstance(obj, ast.Name) and obj.id in params and idx.objects.is_param_only(obj):
            if obj.id not in saves_params:
                saves_params.append(obj.id)
            if isinstance(path, ast.Name) and path.id in params and idx.objects.is_param_only(path):
                path_param = path_param or path.id
    for site in idx.saves.sites:
        if site.report is not site.call or ctx.function_of(site.call) is not fn or site.saved.is_opaque:
            continue
        for piece in site.saved.pieces:
            if piece.key is not None and piece.kind in _STATE_KINDS:
                written.setdefault(piece.key, piece.kind)
        for key in site.saved.weight_keys():
            written.setdefault(key, MODEL)
    if first is None or (not saves_params and not written):
        return None
    return SaveHelper(
        positional, keyword_only, tuple(saves_params), path_param, tuple(sorted(written.items())), place_of(ctx, first)
    )


def _in_memory(ctx: FileContext, path: ast.expr | None) -> bool:
    """A save into an in-memory buffer (``io.BytesIO()``, directly or through a name bound once to
    one): a copy made in memory, no file."""
    if isinstance(path, ast.Name):
        path = ctx.binding(path)
    return isinstance(path, ast.Call) and (ctx.qualname(path.func) or "").endswith("BytesIO")


class CheckpointSavesQuery:
    """The project model's :data:`CHECKPOINT_SAVES` question about a top-level function or class."""

    name = CHECKPOINT_SAVES

    def candidates(self, ctx: FileContext) -> frozenset[str]:
        """Top-level functions and classes of a module that saves (test modules save fixtures)."""
        from traindoctor.facts.data.static import is_test_module

        if "save" not in ctx.source or is_test_module(ctx.filename):
            return frozenset()
        return frozenset(
            s.name for s in ctx.tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        )

    def answer(self, ctx: FileContext, name: str, fresh: bool) -> SaveHelper | ClassSaves | None:
        """A function's :class:`SaveHelper`, or a class's :data:`ClassSaves`."""
        if fresh:
            ctx.forget("checkpoints")
        for stmt in ctx.tree.body:
            if getattr(stmt, "name", None) != name:
                continue
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                return save_helper(ctx, stmt)
            if isinstance(stmt, ast.ClassDef):
                out = []
                for sub in stmt.body:
                    if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        helper = save_helper(ctx, sub)
                        if helper is not None:
                            out.append((sub.name, helper))
                return tuple(out) or None
        return None


CHECKPOINT_SAVES_QUERY = CheckpointSavesQuery()
