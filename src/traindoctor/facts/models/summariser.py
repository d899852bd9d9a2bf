"""What model a definition of another project module builds: the project model's :data:`MODEL_QUERY`.

``from unet import UNet`` then ``model = UNet(3, 2)``: TD202, TD401 and the parameter-name rules
ask what ``UNet`` is made of. Answering means the model analysis of ``unet.py``
(:mod:`traindoctor.facts.models.static`), too costly to run for every module a project imports, so
it is a query: a cheap filter picks the candidates when the module is summarised (classes that may
be ``nn.Module`` subclasses, functions that may return one) and a candidate's answer is computed the first
time a rule asks (:func:`~traindoctor.facts.models.static.model_built_by`). The engine hands
:data:`MODEL_QUERY` to the project model.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from traindoctor.facts.models.static import MODEL, ModelInfo, class_info, forget_models, function_returns
from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


class ModelQuery:
    """What model a top-level class or factory function of a project module builds."""

    name = MODEL

    def candidates(self, ctx: FileContext) -> frozenset[str]:
        """Top-level classes and functions that may build a model (cheap syntactic filters)."""
        tree = ctx.tree
        out: set[str] = set()
        local_classes = {s.name for s in tree.body if isinstance(s, ast.ClassDef)}
        others: list[ast.FunctionDef] = []
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef) and _may_be_module(stmt, local_classes, ctx):
                out.add(stmt.name)
            elif isinstance(stmt, ast.FunctionDef):
                if _may_build_model(stmt, local_classes, ctx):
                    out.add(stmt.name)
                else:
                    others.append(stmt)
        # a factory that returns what another factory of the module builds (timm's registered
        # ``LeViT_256()`` -> ``model_factory(...)`` -> ``LeViT(...)``)
        changed = bool(others)
        while changed:
            changed = False
            for stmt in list(others):
                if any(
                    isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in out
                    for sub in ast.walk(stmt)
                ):
                    out.add(stmt.name)
                    others.remove(stmt)
                    changed = True
        return frozenset(out)

    def answer(self, ctx: FileContext, name: str, fresh: bool) -> ModelInfo | None:
        """What the top-level class or factory function ``name`` of the module builds."""
        if fresh:
            forget_models(ctx)  # answers computed against another project state
        for stmt in ctx.tree.body:
            if getattr(stmt, "name", None) != name:
                continue
            try:
                if isinstance(stmt, ast.ClassDef):
                    info = class_info(ctx, stmt)
                elif isinstance(stmt, ast.FunctionDef):
                    info = function_returns(ctx, stmt, 0)
                else:
                    return None
            except RecursionError:
                return None
            return info if info.kinds or info.known else None
        return None


MODEL_QUERY = ModelQuery()


def _may_be_module(cls: ast.ClassDef, local_classes: set[str], ctx: FileContext) -> bool:
    """A class that may be an ``nn.Module``: a base named ``...Module``, another local class, or a
    name from elsewhere in the project (a cheap filter before the model analysis)."""
    view = ctx.project
    for base in cls.bases:
        text = dotted(base) or ""
        head = text.split(".", 1)[0]
        if text.endswith("Module") or text in local_classes or (head and head not in ctx.imports.names):
            return True
        if view is not None and head in view.bindings:
            return True
    return False


def _may_build_model(fn: ast.FunctionDef, local_classes: set[str], ctx: FileContext) -> bool:
    """A function whose ``return`` may hand back a model: it returns a call of a local class, an
    ``nn``/``torchvision.models`` constructor, a project name or a capitalised (star-imported)
    name, directly or through a variable (a cheap filter before the model analysis)."""
    view = ctx.project
    for sub in ast.walk(fn):
        if isinstance(sub, ast.Call):
            text = dotted(sub.func) or ""
            head = text.split(".", 1)[0]
            if text in local_classes or "nn." in text or text.startswith("torchvision.models"):
                return True
            if view is not None and head in view.bindings:
                return True
            if head and head not in ctx.imports.names and head[:1].isupper():
                return True
    return False
