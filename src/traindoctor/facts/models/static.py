"""What model a file builds: the layer kinds inside it and its parameter names, as far as the file says.

Several rules need to know "does this model contain BatchNorm or Dropout" (TD202, TD701) or "which
names does ``model.named_parameters()`` yield" (TD205), or "does it have any bias / norm parameter"
(TD204). The file answers that only for models it spells out: an ``nn.Sequential`` of known torch
layers, an ``nn.Module`` subclass whose methods assign ``self.<attr> = nn.<Layer>(...)``, or a
torchvision constructor we know. :func:`model_of` resolves an expression (``model``,
``self.net``, ``DDP(Net().cuda())``) to a :class:`ModelInfo`:

* ``kinds`` is a lower bound: layers we saw constructed inside the model (safe for "has BN");
* ``params`` is the *complete* list of parameter names with the layer kind that owns each, or
  ``None`` as soon as anything could add names we cannot see (unknown layers, loops, ``setattr``,
  attributes assigned from parameters). Rules that need exact names stay silent on ``None``.

Nothing here imports torch; results are cached per file.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from traindoctor.facts.models.info import MODEL as MODEL

# re-exported: the rules import these from here
from traindoctor.facts.models.info import UNKNOWN_MODEL as UNKNOWN_MODEL
from traindoctor.facts.models.info import ModelInfo as ModelInfo
from traindoctor.facts.models.info import Params as Params
from traindoctor.facts.models.info import model_built_by as model_built_by
from traindoctor.facts.models.layers import kinds_in, returns_a_container, stored_on_self

# re-exported: the rules import these from here
from traindoctor.facts.models.layers import torch_nn_name as torch_nn_name
from traindoctor.facts.models.registries import TIMM_FACTORIES
from traindoctor.facts.models.registries import registry_entry as registry_entry
from traindoctor.facts.models.registries import registry_model as registry_model
from traindoctor.facts.models.registries import timm_project_model as timm_project_model
from traindoctor.facts.models.torchvision import torchvision_model as torchvision_model
from traindoctor.facts.models.vocab import (
    AFFINE_ARG as _AFFINE_ARG,
)
from traindoctor.facts.models.vocab import (
    CHAIN_METHODS as _CHAIN_METHODS,
)
from traindoctor.facts.models.vocab import (
    COMPOSITE_KINDS as _COMPOSITE_KINDS,
)
from traindoctor.facts.models.vocab import (
    CONTAINERS as _CONTAINERS,
)
from traindoctor.facts.models.vocab import (
    LAYER_PARAMS as _LAYER_PARAMS,
)
from traindoctor.facts.models.vocab import (
    MODULE_BASES as _MODULE_BASES,
)
from traindoctor.facts.models.vocab import (
    PARAMLESS as _PARAMLESS,
)
from traindoctor.facts.models.vocab import (
    TENSOR_FACTORIES as _TENSOR_FACTORIES,
)
from traindoctor.facts.models.vocab import (
    WEIGHT_BIAS as _WEIGHT_BIAS,
)
from traindoctor.facts.models.vocab import (
    WRAPPER_PREFIX as _WRAPPER_PREFIX,
)
from traindoctor.facts.models.vocab import (
    WRAPPERS as _WRAPPERS,
)
from traindoctor.static.args import MISSING, UNKNOWN
from traindoctor.static.names import BATCHNORMS, dotted

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: The key of the per-file cache in ``ctx.shared``.
_CACHE = "models"

# ---------------------------------------------------------------- per-file cache
#: ``self.attr = value`` in a class's methods: (the assignment, attr, value).
SelfAssignment = tuple[ast.Assign | ast.AnnAssign, str, ast.expr]


@dataclass
class _FileModels:
    """What this module found in one file, each part filled the first time it is asked for."""

    classes: dict[str, ast.ClassDef] | None = None
    functions: dict[str, list[ast.FunctionDef]] | None = None
    #: id(class) -> its ``self.attr = value`` assignments.
    self_assignments: dict[int, list[SelfAssignment]] = field(default_factory=dict)
    #: id(class) -> what it builds (None while it is being worked out: a recursion guard).
    class_info: dict[int, ModelInfo | None] = field(default_factory=dict)
    #: Whether :func:`file_has_batchnorm` looked already, and what it found.
    batchnorm_known: bool = False
    batchnorm: ast.AST | None = None


def _cache(ctx: FileContext) -> _FileModels:
    return ctx.shared(_CACHE, lambda _ctx: _FileModels())


def forget_models(ctx: FileContext) -> None:
    """Drop what the file's models were found to build (computed against another project state)."""
    ctx.forget(_CACHE)


def classes(ctx: FileContext) -> dict[str, ast.ClassDef]:
    """Top-level and nested classes of the file by name (the last definition wins)."""
    cache = _cache(ctx)
    if cache.classes is None:
        cache.classes = {c.name: c for c in ctx.of(ast.ClassDef)}
    return cache.classes


def functions(ctx: FileContext) -> dict[str, list[ast.FunctionDef]]:
    cache = _cache(ctx)
    if cache.functions is None:
        table: dict[str, list[ast.FunctionDef]] = {}
        for fn in ctx.of(ast.FunctionDef):
            table.setdefault(fn.name, []).append(fn)
        cache.functions = table
    return cache.functions


def _prefixed(prefix: str, params: Params) -> Params:
    return tuple((prefix + n, k) for n, k in params)


def _merge(infos: list[ModelInfo], label: str = "") -> ModelInfo:
    if not infos:
        return UNKNOWN_MODEL
    kinds = frozenset().union(*(i.kinds for i in infos))
    params: Params | None = None
    collected: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for info in infos:
        if info.params is None:
            break
        for p in info.params:
            if p not in seen:
                seen.add(p)
                collected.append(p)
    else:
        params = tuple(collected)
    return ModelInfo(kinds, params, label or infos[0].label)


def _const_false(ctx: FileContext, node: object) -> bool:
    return node is not MISSING and node is not UNKNOWN and ctx.value(node) is False


def _layer_info(ctx: FileContext, call: ast.Call, name: str, depth: int) -> ModelInfo:
    qn = f"torch.nn.{name}"
    if name in _CONTAINERS:
        return _container_info(ctx, call, name, depth)
    if name in _COMPOSITE_KINDS:
        return ModelInfo(frozenset({qn, *(f"torch.nn.{k}" for k in _COMPOSITE_KINDS[name])}), None, f"nn.{name}")
    if name in _PARAMLESS:
        return ModelInfo(frozenset({qn}), (), f"nn.{name}")
    names = _LAYER_PARAMS.get(name)
    if names is None:
        return ModelInfo(frozenset({qn}), None, f"nn.{name}")
    affine_kw = _AFFINE_ARG.get(name, "affine")
    affine = ctx.arg(call, affine_kw)
    if name.startswith("InstanceNorm"):
        names = _WEIGHT_BIAS if not (affine is MISSING or _const_false(ctx, affine)) else ()
    elif _const_false(ctx, affine):
        names = ()
    if "bias" in names and _const_false(ctx, ctx.arg(call, "bias")):
        names = tuple(n for n in names if n != "bias")
    return ModelInfo(frozenset({qn}), tuple((n, qn) for n in names), f"nn.{name}")


def _container_info(ctx: FileContext, call: ast.Call, name: str, depth: int) -> ModelInfo:
    label = f"nn.{name}"
    kinds = {f"torch.nn.{name}"}
    children: list[tuple[str, ast.expr]] = []
    complete = not call.keywords
    args = list(call.args)
    if (
        name == "Sequential"
        and len(args) == 1
        and isinstance(args[0], ast.Call)
        and (ctx.qualname(args[0].func) or "").endswith("OrderedDict")
    ):
        inner = args[0].args[0] if args[0].args else None
        if isinstance(inner, (ast.List, ast.Tuple)):
            for elt in inner.elts:
                if isinstance(elt, ast.Tuple) and len(elt.elts) == 2 and isinstance(elt.elts[0], ast.Constant):
                    children.append((str(elt.elts[0].value), elt.elts[1]))
                else:
                    complete = False
        else:
            complete = False
    elif name == "Sequential":
        for i, arg in enumerate(args):
            if isinstance(arg, ast.Starred):
                complete = False
                kinds |= kinds_in(ctx, arg)
                continue
            children.append((str(i), arg))
    elif name == "ModuleList" and len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple)):
        children = [(str(i), e) for i, e in enumerate(args[0].elts)]
        complete = not any(isinstance(e, ast.Starred) for e in args[0].elts)
    elif name == "ModuleDict" and len(args) == 1 and isinstance(args[0], ast.Dict):
        for k, v in zip(args[0].keys, args[0].values):
            if isinstance(k, ast.Constant):
                children.append((str(k.value), v))
            else:
                complete = False
    elif args:
        complete = False
        for arg in args:
            kinds |= kinds_in(ctx, arg)
    params: list[tuple[str, str]] = []
    for child_name, expr in children:
        info = model_of(ctx, expr, depth + 1)
        kinds |= info.kinds
        if info.params is None:
            complete = False
        else:
            params.extend(_prefixed(child_name + ".", info.params))
    return ModelInfo(frozenset(kinds), tuple(params) if complete else None, label)


def _not_a_module(ctx: FileContext, value: ast.expr) -> bool:
    """Attribute values that certainly are not submodules (numbers, strings, tensors, flags)."""
    if isinstance(value, (ast.Constant, ast.JoinedStr, ast.Compare, ast.BoolOp)):
        return True
    if isinstance(value, (ast.Tuple, ast.List, ast.Set)):
        return all(isinstance(e, ast.Constant) for e in value.elts)
    if isinstance(value, ast.Dict):
        return all(isinstance(e, ast.Constant) for e in value.values)
    if isinstance(value, (ast.BinOp, ast.UnaryOp)):
        return True
    if ctx.value(value) is not UNKNOWN:
        return True
    if isinstance(value, ast.Call):
        qn = ctx.qualname(value.func) or ""
        if qn.startswith("torch.") and qn.rsplit(".", 1)[-1] in _TENSOR_FACTORIES:
            return True
        if isinstance(value.func, ast.Name) and value.func.id in (
            "int",
            "float",
            "str",
            "bool",
            "len",
            "tuple",
            "list",
            "dict",
        ):
            return True
        return False
    if isinstance(value, ast.Name):
        fn = ctx.function_of(value)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):  # (a def, a lambda or None)
            a = fn.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
            defaults = dict(zip([p.arg for p in [*a.posonlyargs, *a.args]][::-1], a.defaults[::-1]))
            defaults.update({p.arg: d for p, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
            for p in params:
                if p.arg != value.id:
                    continue
                ann = ast.unparse(p.annotation) if p.annotation is not None else ""
                if ann and any(t in ann for t in ("int", "float", "bool", "str")) and "Module" not in ann:
                    return True
                d = defaults.get(p.arg)
                if isinstance(d, ast.Constant) and d.value is not None:
                    return True
    return False


def _self_assignments(ctx: FileContext, cls: ast.ClassDef) -> list[SelfAssignment]:
    """(statement, attr, value) for every ``self.attr = value`` in the class's own methods."""
    cache = _cache(ctx).self_assignments
    found = cache.get(id(cls))
    if found is None:
        found = cache[id(cls)] = list(_scan_self_assignments(cls))
    return found


def _scan_self_assignments(cls: ast.ClassDef) -> Iterable[SelfAssignment]:
    for item in cls.body:
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) or not item.args.args:
            continue
        me = item.args.args[0].arg
        for node in ast.walk(item):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == me:
                        yield node, t.attr, node.value
                    elif (  # ``self.model, self.optimizer = model, optimizer``
                        isinstance(t, ast.Tuple)
                        and isinstance(node.value, ast.Tuple)
                        and len(t.elts) == len(node.value.elts)
                    ):
                        for element, value in zip(t.elts, node.value.elts):
                            if (
                                isinstance(element, ast.Attribute)
                                and isinstance(element.value, ast.Name)
                                and element.value.id == me
                            ):
                                yield node, element.attr, value


def class_info(ctx: FileContext, cls: ast.ClassDef, depth: int = 0) -> ModelInfo:
    """What ``cls()`` builds, if ``cls`` is an ``nn.Module`` subclass defined in the file."""
    cache = _cache(ctx).class_info
    key = id(cls)
    if key in cache:
        known = cache[key]
        return known if known is not None else UNKNOWN_MODEL
    cache[key] = None  # recursion guard
    kinds = kinds_in(ctx, cls)
    complete = True
    base_infos: list[ModelInfo] = []
    is_module = False
    for base in cls.bases:
        qn = ctx.qualname(base)
        if qn in _MODULE_BASES:
            is_module = True
        elif isinstance(base, ast.Name) and base.id in classes(ctx) and classes(ctx)[base.id] is not cls:
            info = class_info(ctx, classes(ctx)[base.id], depth + 1)
            base_infos.append(info)
            is_module = is_module or bool(info.kinds) or info.known
            kinds |= info.kinds
        else:
            complete = False
    if not is_module and complete:
        result = UNKNOWN_MODEL
        cache[key] = result
        return result
    kinds |= _local_constructions(ctx, cls, depth)
    for node in ctx.walk(cls):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and (
                node.func.attr in ("add_module", "register_module", "register_parameter")
                or (
                    node.func.attr in ("append", "extend", "update", "insert")
                    and (dotted(node.func.value) or "").startswith("self.")
                )
            )
        ):
            complete = False
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr":
            complete = False
    attrs: dict[str, list[ModelInfo]] = {}
    for stmt, attr, value in _self_assignments(ctx, cls):
        if any(isinstance(a, (ast.For, ast.While, ast.AsyncFor)) for a in ctx.ancestors(stmt) if ctx.within(a, cls)):
            complete = False
        if isinstance(value, ast.Call) and (ctx.qualname(value.func) or "") in (
            "torch.nn.Parameter",
            "torch.nn.parameter.Parameter",
        ):
            attrs.setdefault(attr, []).append(ModelInfo(frozenset(), (("", "torch.nn.Parameter"),)))
            continue
        if _not_a_module(ctx, value):
            continue
        info = model_of(ctx, value, depth + 1)
        if not info.kinds and not info.known:
            complete = False
        attrs.setdefault(attr, []).append(info)
    params: list[tuple[str, str]] = []
    for info in base_infos:
        if info.params is None:
            complete = False
        else:
            params.extend(info.params)
    for attr in sorted(attrs):
        merged = _merge(attrs[attr])
        kinds |= merged.kinds
        if merged.params is None:
            complete = False
            continue
        for n, k in merged.params:
            params.append((f"{attr}.{n}" if n else attr, k))
    result = ModelInfo(frozenset(kinds), tuple(params) if complete else None, cls.name)
    cache[key] = result
    return result


def _local_constructions(ctx: FileContext, cls: ast.ClassDef, depth: int) -> set[str]:
    """Layer kinds of the file's own module classes and model-building functions that ``cls``
    constructs anywhere in its body (``self.blocks.append(Residual(Attention(...)))``,
    ``self.add_module("bn", Conv2d_BN(...))``): a lower bound, as :func:`_kinds_in` is."""
    out: set[str] = set()
    if depth > 6:
        return out
    local, fns = classes(ctx), functions(ctx)
    for node in ctx.walk(cls):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        name = node.func.id
        if name in ctx.imports.names:
            continue
        other = local.get(name)
        if other is not None and other is not cls:
            out |= class_info(ctx, other, depth + 1).kinds
        elif other is None and len(fns.get(name, ())) == 1 and ctx.function_of(fns[name][0]) is None:
            out |= function_returns(ctx, fns[name][0], depth + 1).kinds
            if stored_on_self(ctx, node) and returns_a_container(ctx, fns[name][0]):
                # ``self.hyperparams, self.module_list = create_modules(defs)``: the layers the
                # helper builds (``modules.add_module("bn", nn.BatchNorm2d(n))``) are the module's
                out |= kinds_in(ctx, fns[name][0])
    return out


def _stored_argument_kinds(ctx: FileContext, cls: ast.ClassDef, call: ast.Call, depth: int) -> set[str]:
    """Layer kinds of the models ``call`` (a construction of ``cls``) passes for constructor
    parameters the class keeps as submodules (``self.patch_embed = hybrid_backbone`` with
    ``LeViT(..., hybrid_backbone=b16(...))``)."""
    init = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__" and s.args.args), None)
    if init is None:
        return set()
    stored = {
        value.id
        for stmt, _attr, value in _self_assignments(ctx, cls)
        if isinstance(value, ast.Name) and ctx.function_of(stmt) is init
    }
    if not stored:
        return set()
    positional = [p.arg for p in [*init.args.posonlyargs, *init.args.args][1:]]
    bound: list[tuple[str, ast.expr]] = []
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred):
            break
        if i < len(positional):
            bound.append((positional[i], arg))
    bound += [(kw.arg, kw.value) for kw in call.keywords if kw.arg is not None]
    out: set[str] = set()
    for param, arg in bound:
        if param in stored and isinstance(arg, ast.Call):
            out |= model_of(ctx, arg, depth + 1).kinds
    return out


def function_returns(ctx: FileContext, fn: ast.FunctionDef, depth: int) -> ModelInfo:
    """What the models a function of the file returns are made of."""
    infos = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and node.value is not None and ctx.function_of(node) is fn:
            infos.append(model_of(ctx, node.value, depth + 1))
    return _merge(infos) if infos else UNKNOWN_MODEL


def model_of(ctx: FileContext, expr: ast.AST | None, depth: int = 0, _seen: frozenset[int] = frozenset()) -> ModelInfo:
    """What the file says about the model ``expr`` evaluates to (UNKNOWN_MODEL when nothing)."""
    if expr is None or depth > 8:
        return UNKNOWN_MODEL
    if isinstance(expr, ast.Call):
        func = expr.func
        qn = ctx.qualname(func) or ""
        name = torch_nn_name(ctx, func) if qn not in _WRAPPERS else None  # ``nn.DataParallel(m)``: m
        if name is not None and name[:1].isupper():
            return _layer_info(ctx, expr, name, depth)
        if qn in _WRAPPERS and expr.args:
            inner = model_of(ctx, expr.args[0], depth + 1, _seen)
            if inner.params is None:
                return inner
            return ModelInfo(inner.kinds, _prefixed(_WRAPPER_PREFIX[qn], inner.params), inner.label)
        if qn == "torch.nn.SyncBatchNorm.convert_sync_batchnorm" and expr.args:
            inner = model_of(ctx, expr.args[0], depth + 1, _seen)
            return ModelInfo(inner.kinds | {"torch.nn.SyncBatchNorm"}, inner.params, inner.label)
        if qn.startswith("torchvision.models."):
            return torchvision_model(qn.rsplit(".", 1)[-1]) or UNKNOWN_MODEL
        if qn in TIMM_FACTORIES:
            return timm_project_model(ctx, expr)
        if isinstance(func, ast.Attribute) and func.attr in _CHAIN_METHODS:
            return model_of(ctx, func.value, depth + 1, _seen)
        if isinstance(func, ast.Name) and func.id not in ctx.imports.names:
            cls = classes(ctx).get(func.id)
            if cls is not None:
                info = class_info(ctx, cls, depth + 1)
                passed = _stored_argument_kinds(ctx, cls, expr, depth)
                return replace(info, kinds=info.kinds | passed) if passed - info.kinds else info
            fns = functions(ctx).get(func.id)
            if fns and len(fns) == 1:
                return function_returns(ctx, fns[0], depth)
        if isinstance(func, ast.Subscript):
            found = registry_model(ctx, func)
            return found if found is not UNKNOWN_MODEL else dispatch_model(ctx, func, depth)
        return project_model(ctx, func)
    return _model_of_value(ctx, expr, depth, _seen)


def dispatch_model(ctx: FileContext, func: ast.Subscript, depth: int) -> ModelInfo:
    """What ``nets[args.arch](...)`` builds when ``nets`` is bound once, to a dict literal of model
    classes or factories: the entry the key names when its value is known, else what every entry
    is made of (the layer kinds they all have; unknown if one of them is unknown)."""
    holder = func.value
    bound = ctx.bindings_of(holder) if isinstance(holder, ast.Name) else None
    if not bound or len(bound) != 1 or not isinstance(bound[0], ast.Dict):
        return UNKNOWN_MODEL
    table = bound[0]
    if any(k is None for k in table.keys) or not table.values:
        return UNKNOWN_MODEL  # ``{**others}``: entries we cannot list
    entries = {ctx.value(k): v for k, v in zip(table.keys, table.values) if k is not None}
    key = ctx.value(func.slice)
    values = [entries[key]] if isinstance(key, str) and key in entries else table.values
    infos = [_constructor_info(ctx, v, depth) for v in values]
    if any(not i.kinds for i in infos):
        return UNKNOWN_MODEL
    if len(infos) == 1:
        return infos[0]
    return ModelInfo(frozenset.intersection(*(i.kinds for i in infos)), None, infos[0].label)


def _constructor_info(ctx: FileContext, value: ast.expr, depth: int) -> ModelInfo:
    """What calling the class or factory ``value`` names builds (a dict entry ``models.ResNet``)."""
    if isinstance(value, ast.Name) and value.id not in ctx.imports.names:
        cls = classes(ctx).get(value.id)
        if cls is not None:
            return class_info(ctx, cls, depth + 1)
        fns = functions(ctx).get(value.id)
        return function_returns(ctx, fns[0], depth) if fns and len(fns) == 1 else UNKNOWN_MODEL
    qn = ctx.qualname(value) or ""
    if qn.startswith("torchvision.models."):
        return torchvision_model(qn.rsplit(".", 1)[-1]) or UNKNOWN_MODEL
    return project_model(ctx, value)


def project_model(ctx: FileContext, func: ast.AST) -> ModelInfo:
    """What a model class or factory of another project module builds (``from unet import UNet``)."""
    view = ctx.project
    if view is None or not isinstance(func, (ast.Name, ast.Attribute)) or not view.imports_project:
        return UNKNOWN_MODEL
    resolved = view.resolve(func)
    model = model_built_by(resolved) if resolved is not None else None
    return model if model is not None else UNKNOWN_MODEL


def _model_of_value(ctx: FileContext, expr: ast.AST, depth: int, _seen: frozenset[int]) -> ModelInfo:
    if isinstance(expr, ast.Name):
        if id(expr) in _seen:
            return UNKNOWN_MODEL
        bound = ctx.bindings_of(expr)
        if not bound:
            return UNKNOWN_MODEL
        infos: list[ModelInfo] = []
        seen = _seen | {id(b) for b in bound if b is not None}
        unpacked: list[ModelInfo | None] | None = None
        for value in bound:
            if value is None:
                # ``args, model = setup(args)``, ``model, opt = amp.initialize(model, opt)``, a
                # parameter: what the call returns there, or what the file's callers pass
                if unpacked is None:
                    unpacked = _unevaluated(ctx, expr, bound, depth, seen)
                if not unpacked:
                    return UNKNOWN_MODEL
                got = unpacked.pop()
                if got is not None:
                    infos.append(got)
                continue
            if id(value) in _seen:
                continue
            if _self_reference(value, expr.id) or _handed_back(ctx, value, None, expr.id):
                continue
            infos.append(model_of(ctx, value, depth + 1, seen))
        return _merge(infos)
    if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and expr.value.id == "self":
        cls = ctx.enclosing(expr, ast.ClassDef)
        if not isinstance(cls, ast.ClassDef):  # None
            return UNKNOWN_MODEL
        values = [v for _, attr, v in _self_assignments(ctx, cls) if attr == expr.attr]
        if not values:
            return UNKNOWN_MODEL
        return _merge([model_of(ctx, v, depth + 1, _seen) for v in values])
    return UNKNOWN_MODEL


#: APIs that hand back the modules and optimizers they are given, in order (their parameters).
_HANDING_BACK = {"apex.amp.initialize": ("models", "optimizers")}


def _unpacked(ctx: FileContext, name: ast.Name, depth: int, seen: frozenset[int]) -> list[ModelInfo | None] | None:
    """What the tuple assignments in ``name``'s scope bind it to, one entry each: None for a model
    the call hands back (:func:`_handed_back`), else what the file's function returns in that slot
    (``args, model = setup(args)``). None when one of them cannot be told."""
    scope = ctx.scope_of(name)
    out: list[ModelInfo | None] = []
    for assign in ctx.of(ast.Assign):
        if ctx.scope_of(assign) is not scope or not isinstance(assign.value, ast.Call):
            continue
        for target in assign.targets:
            if not isinstance(target, (ast.Tuple, ast.List)):
                continue
            if any(isinstance(e, ast.Starred) for e in target.elts):
                return None
            for i, element in enumerate(target.elts):
                if not (isinstance(element, ast.Name) and element.id == name.id):
                    continue
                slot = (i, len(target.elts))
                if _handed_back(ctx, assign.value, slot, name.id):
                    out.append(None)
                    continue
                returned = _returned_in_slot(ctx, assign.value, slot, depth, seen)
                if returned is None:
                    return None
                out.append(returned)
    return out


def _unevaluated(
    ctx: FileContext, name: ast.Name, bound: list[ast.expr | None], depth: int, seen: frozenset[int]
) -> list[ModelInfo | None]:
    """One entry per binding of ``name`` that is no plain assignment (:func:`_unpacked`, and
    :func:`_passed_by_callers` for a parameter); empty when one of them cannot be told."""
    out = _unpacked(ctx, name, depth, seen)
    if out is None:
        return []
    missing = sum(1 for b in bound if b is None) - len(out)
    if missing == 1:
        passed = _passed_by_callers(ctx, name, depth, seen)
        if passed is None:
            return []
        out.append(passed)
    elif missing:
        return []
    return out


def _returned_in_slot(
    ctx: FileContext, call: ast.Call, slot: tuple[int, int], depth: int, seen: frozenset[int]
) -> ModelInfo | None:
    """The model a top-level function of the file returns in ``slot`` of its tuple result (every
    ``return`` a tuple of that length); None when it cannot be told."""
    fn = _local_function(ctx, call)
    if fn is None or id(fn) in seen:
        return None
    infos = []
    for ret in ast.walk(fn):
        if isinstance(ret, ast.Return) and ctx.function_of(ret) is fn:
            if not (isinstance(ret.value, ast.Tuple) and len(ret.value.elts) == slot[1]):
                return None
            infos.append(model_of(ctx, ret.value.elts[slot[0]], depth + 1, seen | {id(fn)}))
    if not infos or any(not i.kinds for i in infos):
        return None
    return _merge(infos)


def _passed_by_callers(ctx: FileContext, name: ast.Name, depth: int, seen: frozenset[int]) -> ModelInfo | None:
    """For ``name`` a parameter of a top-level function of the file: what every call of the
    function in the file passes for it (``valid(args, model)`` called from ``train(args, model)``);
    None when there is no call or a caller's model cannot be told."""
    fn = ctx.function_of(name)
    if not isinstance(fn, ast.FunctionDef) or ctx.function_of(fn) is not None or id(fn) in seen:
        return None
    params = [p.arg for p in [*fn.args.posonlyargs, *fn.args.args]]
    if name.id not in params:
        return None
    index = params.index(name.id)
    sites = [c for c in ctx.of(ast.Call) if isinstance(c.func, ast.Name) and c.func.id == fn.name]
    infos = []
    for site in sites:
        arg = next((k.value for k in site.keywords if k.arg == name.id), None)
        if arg is None and index < len(site.args) and not any(isinstance(a, ast.Starred) for a in site.args):
            arg = site.args[index]
        info = model_of(ctx, arg, depth + 1, seen | {id(fn)}) if arg is not None else UNKNOWN_MODEL
        if not info.kinds:
            return None
        infos.append(info)
    return _merge(infos) if infos else None


def _local_function(ctx: FileContext, call: ast.Call) -> ast.FunctionDef | None:
    """The top-level function of the file ``call`` calls by name, if there is exactly one."""
    if not isinstance(call.func, ast.Name) or call.func.id in ctx.imports.names:
        return None
    fns = functions(ctx).get(call.func.id)
    if not fns or len(fns) != 1 or ctx.function_of(fns[0]) is not None:
        return None
    return fns[0]


def _handed_back(ctx: FileContext, call: ast.expr, slot: tuple[int, int] | None, name: str) -> bool:
    """Whether ``call`` returns the very ``name`` it is passed (at ``slot``: (index, length) of a
    tuple result): ``a, b = f(a, b)`` (``amp.initialize``, ``accelerator.prepare``), or a function
    of the file whose every ``return`` hands back the parameter ``name`` is passed for
    (``model, opt, lr, it = load_checkpoint(path, model, opt)``)."""
    if not isinstance(call, ast.Call):
        return False
    if slot is not None:
        index, length = slot
        args = call.args
        arg = args[index] if len(args) == length else None
        if isinstance(arg, ast.Name) and arg.id == name:
            return True
        keywords = _HANDING_BACK.get(ctx.qualname(call.func) or "")
        if keywords is not None and length == len(keywords):
            arg = next((k.value for k in call.keywords if k.arg == keywords[index]), None)
            if arg is None and index < len(args):
                arg = args[index]
            if isinstance(arg, ast.Name) and arg.id == name:
                return True
    fn = _local_function(ctx, call)
    if fn is None:
        return False
    params = [p.arg for p in [*fn.args.posonlyargs, *fn.args.args]]
    passed = {params[i]: a for i, a in enumerate(call.args[: len(params)]) if not isinstance(a, ast.Starred)}
    passed.update({k.arg: k.value for k in call.keywords if k.arg is not None})
    returns = [r for r in ast.walk(fn) if isinstance(r, ast.Return) and ctx.function_of(r) is fn]
    if not returns:
        return False
    for ret in returns:
        value = ret.value
        if slot is not None:
            if not (isinstance(value, ast.Tuple) and len(value.elts) == slot[1]):
                return False
            value = value.elts[slot[0]]
        if not isinstance(value, ast.Name):
            return False
        arg = passed.get(value.id)
        if not (isinstance(arg, ast.Name) and arg.id == name):
            return False
    return True


def _self_reference(value: ast.expr, name: str) -> bool:
    """``model = model.to(device)`` / ``model = DDP(model)``: a re-wrap, not a new model."""
    node: ast.AST = value
    while isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute) and node.func.attr in _CHAIN_METHODS:
            node = node.func.value
        elif node.args:
            node = node.args[0]
        else:
            return False
    return isinstance(node, ast.Name) and node.id == name


def self_model(ctx: FileContext, node: ast.AST) -> ModelInfo:
    """The model ``self`` is inside the class that contains ``node``."""
    cls = ctx.enclosing(node, ast.ClassDef)
    if not isinstance(cls, ast.ClassDef):  # None
        return UNKNOWN_MODEL
    return class_info(ctx, cls)


def file_has_batchnorm(ctx: FileContext) -> ast.AST | None:
    """The first BatchNorm layer (or torchvision BN model) the file constructs, if any."""
    cache = _cache(ctx)
    if not cache.batchnorm_known:
        found: ast.AST | None = None
        for call in ctx.of(ast.Call):
            name = torch_nn_name(ctx, call.func)
            if name is not None and f"torch.nn.{name}" in BATCHNORMS:
                found = call
                break
            qn = ctx.qualname(call.func) or ""
            if qn.startswith("torchvision.models."):
                tv = torchvision_model(qn.rsplit(".", 1)[-1])
                if tv is not None and tv.has_batchnorm:
                    found = call
                    break
        view = ctx.project
        if found is None and view is not None and view.imports_project:
            # a model of another project module that contains BatchNorm (``from unet import UNet``)
            for call, resolved in view.calls():
                model = model_built_by(resolved)
                if model is not None and model.has_batchnorm:
                    found = call
                    break
        cache.batchnorm, cache.batchnorm_known = found, True
    return cache.batchnorm


def uses_syncbatchnorm(ctx: FileContext) -> bool:
    return ctx.mentions("torch.nn.SyncBatchNorm", "torch.nn.SyncBatchNorm.convert_sync_batchnorm") or any(
        torch_nn_name(ctx, c.func) == "SyncBatchNorm" for _, c in ctx.calls_to_prefix("torch.nn.")
    )
