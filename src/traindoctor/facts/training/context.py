"""Whether a file is training code at all: the context every rule asks whose mistake exists only
in training (the catalog: test code, demos, inference and export code are not training).

:func:`inference_only` answers "this file is inference, evaluation or export code": an entry
script (a ``__main__`` block, a script body, a notebook) that loads a trained model (``torch.load``,
``load_state_dict``, ``from_pretrained``, a project ``load_model``) while no backward pass nor
optimizer is reachable from it -- neither in the file nor in the project functions and classes it
calls (``engine.train_one_epoch`` runs backward: the script drives training). A library module
is inference code when every project file that imports it (:func:`~traindoctor.static.importers.
importers_of`) is: ``validation.py``'s ``run_evaluation`` imported only by ``testing.py`` and
``search_lm_params.py``, which evaluate a trained model. Test files do not count as importers.
Unknown stays training: the rules stay as they were.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from traindoctor.static.names import OPTIMIZERS, dotted, receiver

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
#: Calls that read trained weights (qualified names) ...
_LOAD_CALLS = frozenset(
    (
        "torch.load",
        "torch.jit.load",
        "torch.hub.load",
        "torch.hub.load_state_dict_from_url",
        "safetensors.torch.load_file",
    )
)
#: ... and the words of a callee's own name that say so (``model.load_state_dict``,
#: ``utils.load_model``, ``Net.load_from_checkpoint``, ``AutoModel.from_pretrained``).
_LOAD_NAMES = (
    "load_state_dict",
    "load_checkpoint",
    "load_from_checkpoint",
    "from_pretrained",
    "load_model",
    "load_weights",
    "load_pretrained",
    "load_network",
)
#: Functions that build an optimizer (a project's or a library's factory).
_OPTIMIZER_FACTORIES = frozenset(("create_optimizer", "create_optimizer_v2", "build_optimizer", "make_optimizer"))
#: Method names that train through a framework (``trainer.fit(model)``, ``trainer.train()``).
_FIT = frozenset(("fit", "fit_loop", "training_step"))


def inference_only(ctx: FileContext, node: ast.AST | None = None) -> bool:
    """Whether the code at ``node`` (the whole file when None) is inference, evaluation or export
    code (see the module docstring): the file is an entry script that loads a trained model and
    trains nothing, or -- in a library module -- every project file that uses the top-level
    function or class around ``node`` is such code."""
    name = _top_level(ctx, node) if node is not None else ""
    return bool(ctx.shared(f"training.inference_only.{name}", lambda c: _inference_only(c, name)))


def _inference_only(ctx: FileContext, name: str, depth: int = 0) -> bool:
    # the cheap tests first: most files are no entry script, or train in their own body
    entry = ctx.shared("training.entry_script", _entry_script)
    if not entry and not (name and depth < 3):
        return False
    if entry and not ctx.shared("training.loads_weights", _loads_weights):
        return False
    if ctx.shared("training.reaches_training", lambda c: _trains_here(c) or _calls_training(c, c, 0)):
        return False
    return entry or _used_only_by_inference(ctx, name, depth)


def _used_only_by_inference(ctx: FileContext, name: str, depth: int) -> bool:
    """The top-level definition ``name`` of a library module is used by some project files that
    import the module (their source names it), all of them test files or inference code."""
    from traindoctor.facts.data.names import is_test_file
    from traindoctor.static.importers import importers_of

    view = ctx.project
    if view is None:
        return False
    importers = importers_of(view.project, str(view.path))
    if not importers:
        return False
    judged = 0
    for path in importers:
        if is_test_file(path):
            continue
        summary = view.summary(path)
        module = view.project.module_context(summary) if summary is not None else None
        if module is None:
            return False
        if not re.search(rf"\b{re.escape(name)}\b", module.source):
            continue  # it imports other names of the module
        user = _user_of(module, name)
        if not _inference_only(module, user, depth + 1):
            return False
        other = module.project
        if other is not None:
            view.dependencies.update(other.dependencies)
        judged += 1
    return judged > 0


def _user_of(module: FileContext, name: str) -> str:
    """The top-level function or class of ``module`` that uses ``name`` (for a library importer:
    whether that one is inference code in its turn); empty when several or none."""
    users = {
        _top_level(module, node)
        for node in module.of(ast.Name, ast.Attribute)
        if (node.id if isinstance(node, ast.Name) else node.attr) == name
    }
    users.discard("")
    return users.pop() if len(users) == 1 else ""


def _top_level(ctx: FileContext, node: ast.AST) -> str:
    """The name of the top-level function or class ``node`` is in (empty at module level)."""
    for anc in [node, *ctx.ancestors(node)]:
        if isinstance(anc, (*_FUNCS, ast.ClassDef)) and ctx.parent(anc) is ctx.tree:
            return anc.name
    return ""


def _entry_script(ctx: FileContext) -> bool:
    """A program rather than a library: a notebook, a ``__main__`` block, or a script body (a
    module-level loop, ``with`` block or ``parse_args()``)."""
    if ctx.filename.endswith(".ipynb"):
        return True
    for stmt in ctx.tree.body:
        if isinstance(stmt, ast.If) and _main_guard(stmt.test):
            return True
        if isinstance(stmt, (ast.For, ast.While, ast.With, ast.AsyncFor, ast.AsyncWith)):
            return True
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.Expr)) else None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "parse_args":
            return True
    return False


def _main_guard(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(x, ast.Name) and x.id == "__name__" for x in sides) and any(
        isinstance(x, ast.Constant) and x.value == "__main__" for x in sides
    )


def _loads_weights(ctx: FileContext) -> bool:
    """A call that reads trained weights (:data:`_LOAD_CALLS`, :data:`_LOAD_NAMES`), in the file
    or in a project function it calls (``testing.evaluate`` calling ``utils.load_model``)."""
    if any(_loading(ctx.qualname(call.func) or dotted(call.func) or "") for call in ctx.of(ast.Call)):
        return True
    view = ctx.project
    if view is None or not view.imports_project:
        return False
    for _call, resolved in view.calls():
        facts = resolved.function or resolved.cls
        if facts is not None and any(_loading(q) for q in facts.calls):
            return True
    return False


def _loading(name: str) -> bool:
    leaf = name.rsplit(".", 1)[-1]
    return name in _LOAD_CALLS or any(word in leaf for word in _LOAD_NAMES)


def _trains_here(ctx: FileContext) -> bool:
    """A backward pass, an optimizer (built or stepped) or a framework's ``fit`` in the file."""
    return _trains_in(ctx, None)


def _trains_in(ctx: FileContext, node: ast.AST | None) -> bool:
    """:func:`_trains_here` restricted to the nodes under ``node`` (None: the whole file)."""

    def inside(call: ast.Call) -> bool:
        return node is None or ctx.within(call, node)

    for attr in ("backward", "manual_backward", "zero_grad", *_FIT):
        if any(inside(c) for c in ctx.method_calls(attr)):
            return True  # (``optimizer.zero_grad()``: a step follows, maybe inside a loss scaler)
    for call in ctx.method_calls("step"):
        text = (dotted(receiver(call)) or "").lower()
        if inside(call) and any(word in text for word in ("opt", "scaler", "sched")):
            return True
    if any(inside(c) for c in ctx.calls_to(*sorted(OPTIMIZERS), "torch.autograd.grad", "torch.autograd.backward")):
        return True
    for call in ctx.of(ast.Call):
        leaf = (dotted(call.func) or "").rsplit(".", 1)[-1]
        if inside(call) and leaf in _OPTIMIZER_FACTORIES:
            return True  # ``timm.optim.create_optimizer(args, model)``
    loops = ctx.of(ast.For) if node is None else [n for n in ctx.walk(node) if isinstance(n, ast.For)]
    if any(isinstance(loop.target, ast.Name) and "epoch" in loop.target.id.lower() for loop in loops):
        return True  # an epoch loop drives training done by the functions it calls
    trainer_train = [
        c for c in ctx.method_calls("train") if "trainer" in (dotted(receiver(c)) or "").lower() and inside(c)
    ]
    return bool(trainer_train)


def _calls_training(ctx: FileContext, home: FileContext, depth: int, within: ast.AST | None = None) -> bool:
    """Whether a call in ``ctx`` (under ``within`` when given) reaches a project function or class
    that trains, following project calls ``depth`` levels deep (at most two)."""
    view = ctx.project
    if view is None or not view.imports_project:
        return False
    for call, resolved in view.calls():
        if within is not None and not ctx.within(call, within):
            continue
        if resolved.summary is None or resolved.project is None:
            continue
        module = resolved.project.module_context(resolved.summary)
        if module is None:
            continue
        node = next(
            (s for s in module.tree.body if isinstance(s, (*_FUNCS, ast.ClassDef)) and s.name == resolved.name), None
        )
        if node is None:
            continue
        if _trains_in(module, node) or _local_callees_train(module, node):
            return True
        if depth < 1:
            deeper = _calls_training(module, home, depth + 1, node)
            home_view, module_view = home.project, module.project
            if home_view is not None and module_view is not None:
                home_view.dependencies.update(module_view.dependencies)  # the answer read them
            if deeper:
                return True
    return False


def _local_callees_train(ctx: FileContext, node: ast.AST) -> bool:
    """Whether ``node`` calls (by name, or ``self.x()``) a function or method of its own module that
    trains: ``Trainer.fit`` calling ``self._run_epoch``, ``main`` calling ``train_epoch``."""
    names = {
        (c.func.id if isinstance(c.func, ast.Name) else c.func.attr)
        for c in ast.walk(node)
        if isinstance(c, ast.Call) and isinstance(c.func, (ast.Name, ast.Attribute))
    }
    for fn in ctx.of(*_FUNCS):
        if fn.name in names and fn is not node and _trains_in(ctx, fn):
            return True
    return False
