"""Models named by a string: timm's ``create_model(name)`` over the project's ``@register_model``
functions, and ``models.__dict__[args.arch]`` registries (torchvision or the project's own)."""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import TYPE_CHECKING

from traindoctor.facts.models.info import MODEL, UNKNOWN_MODEL, ModelInfo, model_built_by
from traindoctor.facts.models.torchvision import torchvision_model

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

TIMM_FACTORIES = frozenset({"timm.create_model", "timm.models.create_model", "timm.models.factory.create_model"})


def timm_project_model(ctx: FileContext, call: ast.Call) -> ModelInfo:
    """What ``timm.create_model(name)`` builds when ``name`` is known and a project module this
    file imports defines the model function of that name (registered with ``@register_model``)."""
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "model_name"), None)
    name = ctx.value(arg) if arg is not None else None
    view = ctx.project
    if view is None or not view.imports_project:
        return UNKNOWN_MODEL
    if not isinstance(name, str):
        return registered_models(ctx)  # ``create_model(args.model)`` of no known value
    if not name.isidentifier():
        return UNKNOWN_MODEL
    found = []
    for path, attr in view.bindings.values():
        if attr is None and (resolved := view.project.lookup(path, name)) is not None and resolved.function:
            found.append(resolved)
    if len({r.path for r in found}) != 1:
        return UNKNOWN_MODEL
    view.dependencies.add(found[0].path)
    return model_built_by(replace(found[0], sink=view.dependencies)) or UNKNOWN_MODEL


def registered_models(ctx: FileContext) -> ModelInfo:
    """What every model the file's registering imports provide is made of, for a
    ``create_model(args.model)`` whose name has no known value (a known name that is none of the
    project's may be one of timm's own): ``import xcit`` (a project module
    the file imports only for its ``@register_model`` side effect) registers the candidates; the
    answer is the layer kinds all of them have, unknown if one is unknown or there are none."""
    view = ctx.project
    if view is None:
        return UNKNOWN_MODEL
    used = {n.id for n in ctx.of(ast.Name)}
    infos: list[ModelInfo] = []
    for local, (path, attr) in view.bindings.items():
        if attr is not None or local in used:
            continue  # a module the file uses itself, not (only) for its registrations
        summary = view.project.summary(path)
        module = view.project.module_context(summary) if summary is not None else None
        if summary is None or module is None:
            continue
        for stmt in module.tree.body:
            if not (isinstance(stmt, ast.FunctionDef) and any(_registers(d) for d in stmt.decorator_list)):
                continue
            resolved = view.project.lookup(path, stmt.name)
            info = model_built_by(replace(resolved, sink=view.dependencies)) if resolved is not None else None
            if info is None or not info.kinds:
                return UNKNOWN_MODEL
            view.dependencies.add(path)
            infos.append(info)
    if not infos:
        return UNKNOWN_MODEL
    return ModelInfo(frozenset.intersection(*(i.kinds for i in infos)), None, infos[0].label)


def _registers(decorator: ast.expr) -> bool:
    """``@register_model`` / ``@registry.register_model()`` (timm's registration)."""
    node = decorator.func if isinstance(decorator, ast.Call) else decorator
    leaf = node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")
    return leaf == "register_model"


def registry_entry(ctx: FileContext, func: ast.AST) -> tuple[ast.expr, str] | None:
    """``models.__dict__[args.arch]`` -> (the ``models`` node, ``"resnet18"``) when the key's value
    is known (a literal or an argparse default); the registry idiom of ImageNet-style scripts."""
    if not isinstance(func, ast.Subscript):
        return None
    holder = func.value
    if not (isinstance(holder, ast.Attribute) and holder.attr == "__dict__"):
        return None
    key = ctx.value(func.slice)
    if not isinstance(key, str) or not key.isidentifier():
        return None
    return holder.value, key


def registry_model(ctx: FileContext, func: ast.AST) -> ModelInfo:
    """What ``models.__dict__[args.arch](...)`` builds: a torchvision constructor or a model of
    the project's own ``models`` package, named by the key's known value; for a key of no known
    value (a config's ``model_name``), what every model factory of that project module is made of."""
    entry = registry_entry(ctx, func)
    if entry is None:
        return _any_registered(ctx, func)
    base, key = entry
    qn = ctx.qualname(base) or ""
    if qn == "torchvision.models":
        return torchvision_model(key) or UNKNOWN_MODEL
    view = ctx.project
    if view is None or not view.imports_project:
        return UNKNOWN_MODEL
    resolved = view.resolve(ast.Attribute(value=base, attr=key, ctx=ast.Load()))
    return model_built_by(resolved) or UNKNOWN_MODEL if resolved is not None else UNKNOWN_MODEL


def _any_registered(ctx: FileContext, func: ast.AST) -> ModelInfo:
    """``deit.__dict__[model_name]`` with ``model_name`` unknown, ``deit`` a project module: the
    layer kinds all of the module's public model factories have (unknown if one of them is, or
    if there are none)."""
    if not (isinstance(func, ast.Subscript) and isinstance(func.value, ast.Attribute)):
        return UNKNOWN_MODEL
    holder = func.value
    view = ctx.project
    if holder.attr != "__dict__" or not isinstance(holder.value, ast.Name) or view is None:
        return UNKNOWN_MODEL
    target = view.bindings.get(holder.value.id)
    if target is None or target[1] is not None:
        return UNKNOWN_MODEL  # not a module of the project
    summary = view.summary(target[0])
    if summary is None:
        return UNKNOWN_MODEL
    names = sorted(n for n in summary.answerable.get(MODEL, ()) if n in summary.functions and not n.startswith("_"))
    infos: list[ModelInfo] = []
    for name in names:
        resolved = view.project.lookup(target[0], name)
        info = model_built_by(replace(resolved, sink=view.dependencies)) if resolved is not None else None
        if info is None or not info.kinds:
            return UNKNOWN_MODEL
        infos.append(info)
    if not infos:
        return UNKNOWN_MODEL
    return ModelInfo(frozenset.intersection(*(i.kinds for i in infos)), None, infos[0].label)
