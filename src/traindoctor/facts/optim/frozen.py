"""Frozen parameters: whether only part of a model trains (an adapter, LoRA weights, a new head).

An optimizer handed ``model.parameters()`` only updates the parameters that receive a gradient.
When the code freezes the model as a whole (all of it, or all but the names it keeps) and trains
what it adds or switches back on, the optimizer's settings apply to that part alone: weight decay
"on every parameter" then reaches no frozen bias or norm. The code says so in one of these ways:

* in the file: ``model.requires_grad_(False)``, or a loop over ``model.parameters()`` /
  ``model.named_parameters()`` setting ``requires_grad`` to False or to a test of the name
  (``p.requires_grad = "adapter" in n``), or calling ``p.requires_grad_(False)``;
* through a function the model is handed to: PEFT's ``get_peft_model`` / ``prepare_model_for_kbit_training``
  (they freeze the base model in place), or a function of the same file or of another project
  module that freezes its parameter in one of the ways above (``mark_only_lora_as_trainable(model)``);
* by binding: the model *is* what ``get_peft_model(...)`` returned, or a module built from parts
  of a model the file freezes (``AttnProcsLayers(unet.attn_processors)`` after
  ``unet.requires_grad_(False)``: the adapters attached to it).

A freeze in a branch the defaults do not take (``if args.use_lora:`` with a ``store_true`` flag)
does not count: by default the whole model trains.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from traindoctor.static.branches import not_taken_by_default
from traindoctor.static.names import dotted, receiver

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.callees import FuncDef
    from traindoctor.static.context import FileContext

#: Library functions that freeze the model they are handed (its first argument) and what they return.
PEFT_FREEZERS = frozenset(
    {
        "peft.get_peft_model",
        "peft.mapping.get_peft_model",
        "peft.mapping_func.get_peft_model",
        "peft.prepare_model_for_kbit_training",
        "peft.utils.prepare_model_for_kbit_training",
        "peft.utils.other.prepare_model_for_kbit_training",
    }
)
_DEPTH = 2


def trains_part_of(ctx: FileContext, model: ast.expr) -> bool:
    """Whether the code freezes ``model`` as a whole, so that only what it adds or keeps trains
    (see the module docs). ``model`` is the expression whose ``.parameters()`` an optimizer gets."""
    text = dotted(model)
    if text is None:
        return False
    if _freezes(ctx, ctx.tree, text, 0):
        return True
    return _bound_to_frozen(ctx, model, text)


def _built_from_frozen(ctx: FileContext, value: ast.expr) -> bool:
    """``lora_layers = AttnProcsLayers(unet.attn_processors)`` after ``unet.requires_grad_(False)``:
    a module made of parts of a frozen model holds what the file attached to it (adapters)."""
    if not isinstance(value, ast.Call):
        return False
    for arg in [*value.args, *(k.value for k in value.keywords)]:
        root = arg
        while isinstance(root, ast.Attribute):
            root = root.value
        if root is not arg and isinstance(root, ast.Name) and _freezes(ctx, ctx.tree, root.id, _DEPTH):
            return True
    return False


def _freezes(ctx: FileContext, where: ast.AST, text: str, depth: int) -> bool:
    """Whether code under ``where`` freezes the parameters of ``text`` as a whole."""
    whole_file = where is ctx.tree
    if depth < _DEPTH and _handed_to_freezer(ctx, where, text, depth):
        return True
    if ctx.source.isascii() and "requires_grad" not in ctx.source:
        return False  # every in-file form spells it (ASCII files: identifiers are as written)
    for call in ctx.method_calls("requires_grad_"):
        if (
            dotted(receiver(call)) == text
            and _false(ctx, call)
            and (whole_file or ctx.within(call, where))
            and not not_taken_by_default(ctx, call)
        ):
            return True
    for loop in ctx.of(ast.For, ast.comprehension):
        if not whole_file and not ctx.within(loop.iter, where):
            continue
        found = _parameter_loop(loop, text)
        if found is None:
            continue
        name, param = found
        body: list[ast.AST] = list(loop.body) if isinstance(loop, ast.For) else [ctx.parent(loop) or loop]
        freezes = [n for stmt in body for n in ast.walk(stmt) if _freezes_param(ctx, n, param)]
        if freezes and not not_taken_by_default(ctx, loop) and all(_keeps_no_norm(ctx, n, loop, name) for n in freezes):
            return True
    return False


def _false(ctx: FileContext, call: ast.Call) -> bool:
    arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "requires_grad"), None)
    return arg is not None and ctx.value(arg) is False


def _parameter_loop(loop: ast.For | ast.comprehension, text: str) -> tuple[str | None, str] | None:
    """(the name variable or None, the parameter variable) of ``for p in text.parameters()`` /
    ``for n, p in text.named_parameters()``."""
    it = loop.iter
    if not (
        isinstance(it, ast.Call)
        and isinstance(it.func, ast.Attribute)
        and it.func.attr in ("parameters", "named_parameters")
        and dotted(it.func.value) == text
    ):
        return None
    target = loop.target
    name: str | None = None
    if isinstance(target, ast.Tuple) and len(target.elts) == 2 and it.func.attr == "named_parameters":
        first = target.elts[0]
        name = first.id if isinstance(first, ast.Name) else None
        target = target.elts[1]
    return (name, target.id) if isinstance(target, ast.Name) else None


def _freezes_param(ctx: FileContext, node: ast.AST, param: str) -> bool:
    """``param.requires_grad = False`` (or a test of the name: only some train), or
    ``param.requires_grad_(False)``."""
    if isinstance(node, ast.Assign):
        if not any(
            isinstance(t, ast.Attribute) and t.attr == "requires_grad" and dotted(t.value) == param
            for t in node.targets
        ):
            return False
        value = ctx.value(node.value)
        return value is False or (not isinstance(value, bool) and not isinstance(node.value, ast.Constant))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "requires_grad_":
        return dotted(node.func.value) == param and _false(ctx, node)
    return False


#: Words of parameter names that belong to normalisation layers.
_NORM_WORDS = ("norm", "rms", "bn", "ln")


def _keeps_no_norm(ctx: FileContext, freeze: ast.AST, loop: ast.AST, name: str | None) -> bool:
    """Whether the parameters a name-selective freeze leaves trainable are known to hold no
    normalisation weights: the selection names them by string constants (``if "lora_" not in n:``,
    ``p.requires_grad = "adapter" in n``, a head's ``["fc.weight", "fc.bias"]``) none of which reads
    like a norm layer (``rms_1``, ``ln_f``, ``bn1``). A freeze of everything keeps nothing; a
    selection by other means (a helper's list, the parameter's shape) is not known."""
    tests: list[ast.expr] = []
    positive: list[bool] = []
    if isinstance(freeze, ast.Assign) and ctx.value(freeze.value) is not False:
        tests.append(freeze.value)  # requires_grad = <names kept>
        positive.append(True)
    for anc in ctx.ancestors(freeze):
        if anc is loop or isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef)):
            break
        if isinstance(anc, ast.If):
            tests.append(anc.test)  # if <names frozen>: ... requires_grad = False
            positive.append(not any(ctx.within(freeze, s) for s in anc.body))
    if not tests:
        return True
    if name is None:
        return False
    for test, kept_when_true in zip(tests, positive):
        strings = _selection_strings(ctx, test, name, kept_when_true)
        if strings is None or any(_norm_like(s) for s in strings):
            return False
    return True


def _selection_strings(ctx: FileContext, test: ast.expr, name: str, kept_when_true: bool) -> list[str] | None:
    """The strings a name test matches when the names it keeps are those it matches (``"lora_" in
    n`` keeping, ``"lora_" not in n`` freezing); None when the test is another shape."""
    negated = False
    while isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        negated, test = not negated, test.operand
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.In, ast.NotIn)):
        if isinstance(test.ops[0], ast.NotIn):
            negated = not negated
        left, right = test.left, test.comparators[0]
        # ``"lora_" in n`` (a substring of the name) or ``n in ["fc.weight", "fc.bias"]``
        other = left if isinstance(right, ast.Name) and right.id == name else right
        if not (isinstance(right, ast.Name) and right.id == name) and not (
            isinstance(left, ast.Name) and left.id == name
        ):
            return None
    elif isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) and not negated:
        out: list[str] = []
        for value in test.values:
            found = _selection_strings(ctx, value, name, kept_when_true)
            if found is None:
                return None
            out += found
        return out
    else:
        return None
    if negated == kept_when_true:
        return None  # the test names what is frozen: everything else (norms too) trains
    value = ctx.value(other)
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


def _norm_like(text: str) -> bool:
    words = [w for w in text.lower().replace(".", "_").split("_") if w]
    return any(w.startswith(_NORM_WORDS) or "norm" in w for w in words)


def _handed_to_freezer(ctx: FileContext, where: ast.AST, text: str, depth: int) -> bool:
    """``get_peft_model(model, ...)``, ``mark_only_lora_as_trainable(model)``: a call under
    ``where`` hands ``text`` to a function that freezes what it receives."""
    from traindoctor.static.callees import function_definition, parameter_for

    whole_file = where is ctx.tree
    for call in ctx.of(ast.Call):
        if not whole_file and not ctx.within(call, where):
            continue
        args = [*call.args, *(k.value for k in call.keywords)]
        handed = [a for a in args if dotted(a) == text]
        if not handed or not_taken_by_default(ctx, call):
            continue
        qn = ctx.qualname(call.func) or ""
        if qn in PEFT_FREEZERS:
            if call.args and call.args[0] in handed:
                return True
            continue
        found = function_definition(ctx, call)
        if found is None:
            continue
        module, fn = found
        for arg in handed:
            param = parameter_for(fn, call, arg)
            if param is not None and _freezes_parameter_of(module, fn, param, depth + 1):
                return True
    return False


def _freezes_parameter_of(ctx: FileContext, fn: FuncDef, param: str, depth: int) -> bool:
    """Whether the function ``fn`` (of the file of ``ctx``) freezes its parameter ``param`` as a whole."""
    if any(isinstance(n, ast.Name) and n.id == param and isinstance(n.ctx, ast.Store) for n in ast.walk(fn)):
        return False  # rebound: what it freezes may be another model
    return _freezes(ctx, fn, param, depth)


def _bound_to_frozen(ctx: FileContext, model: ast.expr, text: str) -> bool:
    """The model is what a PEFT wrapper returned (``model = get_peft_model(model, config)``)."""
    values: list[ast.expr] = []
    if isinstance(model, ast.Name):
        values = [v for v in ctx.bindings_of(model) or () if v is not None]
    else:
        for stmt in ctx.of(ast.Assign):
            if any(dotted(t) == text for t in stmt.targets):
                values.append(stmt.value)
    for value in values:
        if (
            isinstance(value, ast.Call)
            and (ctx.qualname(value.func) or "") in PEFT_FREEZERS
            and not not_taken_by_default(ctx, value)
        ):
            return True
    return bool(values) and all(_built_from_frozen(ctx, v) for v in values)
