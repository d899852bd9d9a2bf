"""The shared base of the checkpoint index: one file, the training objects it builds, and what
an expression denotes.

:class:`TrainingObjects` finds the optimizers, LR schedulers, GradScalers, samplers and loaders
a file builds (at their constructor calls, filed under the name they are assigned to) and
classifies any expression by them (:meth:`TrainingObjects.classify`); it also knows the file's
local functions and who calls them, and the uses of each name. Each job of the index (what the
saves hold, the training loop, paths, checkpoints, resume) is an :class:`IndexPart` that asks it.
"""

from __future__ import annotations

import ast
import re
from functools import cached_property
from typing import TYPE_CHECKING

from traindoctor.facts.checkpoint.static.vocabulary import (
    LOAD_FUNCS,
    SAVE_FUNCS,
    SAVE_WRAPPERS,
    constructor_kind,
    kind_from_name,
)
from traindoctor.static.names import dotted, receiver
from traindoctor.static.vocab import DATA, MODEL, OPTIMIZER, SCALER, SCHEDULER

if TYPE_CHECKING:
    from traindoctor.static.context import FileContext

FUNCTION_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


class TrainingObjects:
    """The training objects one file builds, its local functions, and the shared classification."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        #: kind -> {dotted name -> constructor call} for objects the file builds.
        self.built: dict[str, dict[str, ast.Call]] = {OPTIMIZER: {}, SCHEDULER: {}, SCALER: {}, DATA: {}}
        #: dotted names assigned from a call and named like an optimizer (``opt = build(...)``).
        self.named_optimizers: set[str] = set()

    def find(self) -> None:
        """File every training object the file builds (only files that save or load do)."""
        ctx = self.ctx
        stepped: list[tuple[str, ast.Call]] = []
        for call in ctx.of(ast.Call):
            qn = ctx.qualname(call.func)
            kind = constructor_kind(qn) if qn else None
            if kind is None:
                if isinstance(call.func, (ast.Name, ast.Attribute)):
                    target = _assigned_name(ctx, call)
                    named = kind_from_name(target) if target is not None else None
                    if target is not None and named == OPTIMIZER:
                        self.named_optimizers.add(target)
                    elif target is not None and named == SCHEDULER and self._handed_optimizer(call):
                        stepped.append((target, call))
                continue
            target = _assigned_name(ctx, call)
            if kind == SCALER and ctx.value(ctx.arg(call, "enabled")) is False:
                continue  # a scaler built disabled keeps no state worth saving
            if kind == SCHEDULER and qn and qn.split(".")[-1].startswith("create_scheduler"):
                target = _assigned_name(ctx, call, first_of_tuple=True)
            self.built[kind].setdefault(target or f"<{kind}@{call.lineno}>", call)
        # A schedule built by a project's or library's own class or factory (``sched =
        # K.utils.InverseLR(opt, ...)``, ``scheduler = build_scheduler(cfg, optimizer)``): named
        # like one, handed the optimizer, and advanced by itself here (``sched.step()``, no epoch).
        steps = {dotted(receiver(c)) for c in ctx.method_calls("step") if not c.args and not c.keywords}
        for target, call in stepped:
            if target in steps:
                self.built[SCHEDULER].setdefault(target, call)

    def _handed_optimizer(self, call: ast.Call) -> bool:
        """Whether a call is handed an optimizer the file builds or names as one (first argument or
        ``optimizer=``)."""
        args = [*call.args[:1], *(k.value for k in call.keywords if k.arg == "optimizer")]
        for arg in args:
            text = dotted(arg)
            if text is not None and (
                text in self.built[OPTIMIZER] or text in self.named_optimizers or kind_from_name(text) == OPTIMIZER
            ):
                return True
        return False

    @property
    def has_optimizer(self) -> bool:
        """The file builds an optimizer (or assigns one from a call named like one)."""
        return bool(self.built[OPTIMIZER]) or bool(self.named_optimizers)

    def exists(self, kind: str) -> list[tuple[str, ast.Call]]:
        """(name, constructor) of each object of ``kind`` the file builds, in source order."""
        items = sorted(self.built.get(kind, {}).items(), key=lambda kv: (kv[1].lineno, kv[1].col_offset))
        return items

    def first_name(self, kind: str, default: str) -> str:
        """The name of the first object of ``kind`` (for advice), else ``default``."""
        for name, _ in self.exists(kind):
            if not name.startswith("<"):
                return name
        if kind == OPTIMIZER and self.named_optimizers:
            return sorted(self.named_optimizers)[0]
        return default

    def classify(self, expr: ast.AST) -> str:
        """What object an expression denotes: optimizer, scheduler, scaler, data or model."""
        for _ in range(4):
            if isinstance(expr, ast.Subscript):
                expr = expr.value
                continue
            if isinstance(expr, ast.Call):
                name = callee_name(expr) or ""
                if expr.args and re.search(r"unwrap|de_?parallel|get_model|get_state_dict|module_of", name):
                    expr = expr.args[0]
                    continue
                return kind_from_name(name) or MODEL
            break
        text = dotted(expr)
        if text is None:
            return MODEL
        while text.endswith(".module") or text.endswith("._orig_mod"):
            text = text.rsplit(".", 1)[0]
        for kind in (OPTIMIZER, SCHEDULER, SCALER, DATA):
            if text in self.built[kind]:
                return kind
        if text in self.named_optimizers:
            return OPTIMIZER
        return kind_from_name(text) or MODEL

    def optimizers_are_stateless(self) -> bool:
        """Every optimizer the file builds is plain SGD without momentum: it keeps no per-parameter
        state (no momentum buffer, no moments), so a checkpoint without it loses nothing."""
        built = self.built[OPTIMIZER]
        if self.named_optimizers or not built:
            return False
        return all(self.stateless(call) for call in built.values())

    def stateless(self, call: ast.Call) -> bool:
        """Whether an optimizer constructor builds plain SGD without momentum (no state)."""
        return self.ctx.qualname(call.func) == "torch.optim.SGD" and (
            self.ctx.arg_value(call, "momentum", default=0, qualname="torch.optim.SGD") == 0
        )

    # -------------------------------------------------------------- local functions and names
    @cached_property
    def local_functions(self) -> dict[str, list[ast.AST]]:
        """Name -> the functions (and methods) the file defines under it."""
        out: dict[str, list[ast.AST]] = {}
        for fn in self.ctx.of(*FUNCTION_DEFS):
            out.setdefault(fn.name, []).append(fn)
        return out

    def local_target(self, call: ast.Call) -> str | None:
        """Name of the local function a call invokes (``f(...)`` or ``self.f(...)``), else None."""
        func = call.func
        if isinstance(func, ast.Name) and func.id in self.local_functions and func.id not in self.ctx.imports.names:
            return func.id
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
            and func.attr in self.local_functions
        ):
            return func.attr
        return None

    @cached_property
    def local_calls(self) -> list[tuple[str, ast.Call]]:
        """(local function name, call) for every call of a function the file defines."""
        out = []
        for call in self.ctx.of(ast.Call):
            name = self.local_target(call)
            if name is not None:
                out.append((name, call))
        return out

    def callers_of(self, fn: ast.AST) -> list[ast.Call]:
        """The calls of local function ``fn`` from outside its own body."""
        name = getattr(fn, "name", None)
        return [c for n, c in self.local_calls if n == name and not self.ctx.within(c, fn)]

    @cached_property
    def name_uses(self) -> dict[str, list[ast.Name]]:
        """Identifier -> every ``ast.Name`` of it in the file."""
        return self.ctx.names_by_id

    def is_param_only(self, name: ast.Name) -> bool:
        """Whether ``name`` is bound only where its value is unseen (a parameter, a loop target)."""
        bound = self.ctx.bindings_of(name)
        return bound is not None and all(b is None for b in bound)

    def benign_consumer(self, call: ast.Call) -> bool:
        """Calls that read a checkpoint dict without adding to it (the save itself, printing...)."""
        qn = self.ctx.qualname(call.func)
        if qn in SAVE_FUNCS or qn in LOAD_FUNCS:
            return True
        if self.local_target(call) is not None:
            return True
        name = callee_name(call) or ""
        return (
            name
            in (
                "print",
                "len",
                "isinstance",
                "info",
                "debug",
                "warning",
                "log",
                "save",
                "keys",
                "items",
                "values",
                "sorted",
                "list",
                "load_state_dict",
                "update",
            )
            or name in SAVE_WRAPPERS
        )


class IndexPart:
    """One job of the checkpoint index, asking the file's :class:`TrainingObjects`."""

    def __init__(self, objects: TrainingObjects) -> None:
        self.objects = objects
        self.ctx = objects.ctx


def arg_of(ctx: FileContext, call: ast.Call, name: str, pos: int) -> ast.expr | None:
    """The argument ``name`` of ``call``, passed by keyword or at position ``pos``, else None."""
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if len(call.args) > pos and not any(isinstance(a, ast.Starred) for a in call.args[: pos + 1]):
        return call.args[pos]
    return None


def position(node: ast.AST) -> tuple[int, int]:
    """Where ``node`` starts: (line, column)."""
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def end_position(node: ast.AST) -> tuple[int, int]:
    """Where ``node`` ends: (line, column)."""
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def callee_name(call: ast.Call) -> str | None:
    """The last name of what ``call`` calls (``save`` for ``utils.save(...)``), else None."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _assigned_name(ctx: FileContext, call: ast.Call, first_of_tuple: bool = False) -> str | None:
    """The dotted name ``call``'s value is assigned to (the first of a tuple if asked), else None."""
    parent = ctx.parent(call)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        for t in targets:
            if isinstance(t, ast.Tuple) and first_of_tuple and t.elts:
                t = t.elts[0]
            text = dotted(t)
            if text is not None:
                return text
    return None
