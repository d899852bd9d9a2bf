"""Mixed-precision facts shared by the TD3xx rules, computed once per file.

The AMP rules all ask the same questions about a training script: which ``with`` blocks run under
autocast and in which dtype, which objects are GradScalers, which ``backward()`` calls go through
``scaler.scale(loss)`` and which do not, and whether a loss computed inside an autocast block is
the one that is backpropagated. :func:`amp_facts` answers them for one :class:`FileContext` and
caches the answer, so seven rules share one analysis.

The analysis is deliberately per function: a training step and an evaluation step in the same
file are judged separately, because a GradScaler used correctly in one function does not protect
a plain ``loss.backward()`` in another. Whenever a value cannot be resolved from the file (a dtype
chosen from a config, a device known only at run time) the answer is ``None`` and rules stay
silent.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from traindoctor.facts.frameworks.static import framework_backward_unscaled
from traindoctor.static.args import MISSING, UNKNOWN, ArgResult, find_arg
from traindoctor.static.names import dotted, receiver
from traindoctor.static.vocab import BFLOAT16, DTYPE_NAMES, FLOAT16  # re-exported

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


#: Autocast entry points -> the device they imply (None: given by the ``device_type`` argument).
AUTOCAST_DEVICE: dict[str, str | None] = {
    "torch.autocast": None,
    "torch.cuda.amp.autocast": "cuda",
    "torch.cpu.amp.autocast": "cpu",
}
#: Positional parameter order of each autocast entry point.
AUTOCAST_SIGNATURES: dict[str, tuple[str, ...]] = {
    "torch.autocast": ("device_type", "dtype", "enabled", "cache_enabled"),
    "torch.cuda.amp.autocast": ("enabled", "dtype", "cache_enabled"),
    "torch.cpu.amp.autocast": ("enabled", "dtype", "cache_enabled"),
}
#: Every GradScaler class, under each name it is imported by.
GRAD_SCALERS: frozenset[str] = frozenset(
    {
        "torch.amp.GradScaler",
        "torch.GradScaler",
        "torch.cuda.amp.GradScaler",
        "torch.cpu.amp.GradScaler",
        "torch.cpu.amp.grad_scaler.GradScaler",
        "torch.distributed.fsdp.ShardedGradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
    }
)
GRAD_SCALER_SIGNATURE: tuple[str, ...] = (
    "init_scale",
    "growth_factor",
    "backoff_factor",
    "growth_interval",
    "enabled",
)
#: Gradient clipping functions that read ``.grad`` (and so see scaled gradients).
CLIP_FUNCTIONS: frozenset[str] = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad_value_",
        "torch.nn.utils.clip_grad_norm",
        "torch.nn.utils.clip_grad.clip_grad_norm",
        "torch.nn.utils.clip_grads_with_norm_",
        "torch.nn.utils.clip_grad.clip_grads_with_norm_",
    }
)
#: Context managers that do nothing: ``nullcontext() if cpu else autocast(...)``.
_NULL_CONTEXTS = frozenset({"contextlib.nullcontext", "contextlib.suppress", "contextlib.ExitStack"})
#: Default autocast dtype per device type (``torch.get_autocast_dtype``); others are unknown.
_DEFAULT_DTYPE = {"cuda": FLOAT16, "cpu": BFLOAT16}
_SCOPE_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)

Pos = tuple[int, int]


def pos(node: ast.AST) -> Pos:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def end_pos(node: ast.AST) -> Pos:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def is_scaler_name(text: str | None) -> bool:
    """Whether a dotted name reads like a loss scaler (``scaler``, ``self.grad_scaler``)."""
    return text is not None and "scaler" in text.rsplit(".", 1)[-1].lower()


@dataclass
class Autocast:
    """One autocast region: a ``with`` item, or a decorator on a function."""

    #: The autocast constructor call (possibly found through a name binding or a partial).
    call: ast.Call
    #: What the finding points at: the ``with`` item's expression or the decorator.
    site: ast.expr
    #: The ``with`` statement, or None for a decorator.
    with_stmt: ast.With | ast.AsyncWith | None
    qualname: str
    #: "cuda", "cpu", ... or None when it cannot be known from the file.
    device: str | None
    #: FLOAT16, BFLOAT16, FLOAT32 or None when it cannot be known from the file.
    dtype: str | None
    #: False only when the file says so (``enabled=False``); None when unknown.
    enabled: bool | None
    #: The function (or module) the region runs in.
    scope: ast.AST

    @property
    def is_fp16(self) -> bool:
        return self.dtype == FLOAT16 and self.enabled is not False

    @property
    def is_bf16(self) -> bool:
        return self.dtype == BFLOAT16


@dataclass
class Backward:
    """One ``.backward()`` call and how it treats the loss."""

    call: ast.Call
    #: "direct" (``loss.backward()``), "scaled" (``scaler.scale(loss).backward()``) or
    #: "wrapper" (``accelerator.backward(loss)``: a framework that scales on its own).
    kind: str
    #: The expression that is backpropagated (the loss), when visible.
    loss: ast.expr | None
    #: Dotted name of the scaler for "scaled" backwards.
    scaler: str | None
    facts: AmpFacts = field(repr=False)

    @cached_property
    def scope(self) -> ast.AST:
        """The function (or module) the call runs in; computed on demand (it needs parents)."""
        return self.facts.scope(self.call)


@dataclass
class ScalerConstruction:
    call: ast.Call
    qualname: str
    #: Dotted name the scaler is assigned to (``scaler``, ``self.scaler``), if any.
    target: str | None
    #: False when disabled by a literal (or a constant), True when enabled, None when unknown.
    enabled: bool | None


def _parameters(scope: ast.AST) -> set[str]:
    """The parameter names of a function scope (none for a module)."""
    if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        return set()
    a = scope.args
    return {p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]}


@dataclass
class AmpFacts:
    """Everything the AMP rules need to know about one file (see :func:`amp_facts`)."""

    ctx: FileContext
    _taint_cache: dict[int, frozenset[str]] = field(default_factory=dict)

    # ------------------------------------------------------------------ scopes
    def scope(self, node: ast.AST) -> ast.AST:
        """The innermost function around ``node``, else the module."""
        fn = self.ctx.function_of(node)
        return fn if fn is not None else self.ctx.tree

    def in_scope(self, nodes: Iterable[ast.AST], scope: ast.AST) -> list[ast.AST]:
        return [n for n in nodes if self.scope(n) is scope]

    # ------------------------------------------------------------------ dtypes and devices
    def dtype_of(self, node: ArgResult | None, depth: int = 0) -> str | None:
        """FLOAT16 / BFLOAT16 / FLOAT32 for a dtype expression the file determines, else None."""
        if not isinstance(node, ast.expr) or depth > 6:  # None, MISSING or UNKNOWN
            return None
        qn = self.ctx.qualname(node)
        if qn in DTYPE_NAMES:
            return DTYPE_NAMES[qn]
        if isinstance(node, ast.Name):
            return self.dtype_of(self.ctx.binding(node), depth + 1)
        if isinstance(node, ast.IfExp):
            a = self.dtype_of(node.body, depth + 1)
            return a if a is not None and a == self.dtype_of(node.orelse, depth + 1) else None
        return None

    def device_of(self, node: ArgResult | None, depth: int = 0) -> str | None:
        """The device type (``"cuda"``) a device expression names, else None."""
        if not isinstance(node, ast.expr) or depth > 6:  # None, MISSING or UNKNOWN
            return None
        value = self.ctx.value(node)
        if isinstance(value, str) and value:
            return value.split(":", 1)[0]
        # ``device.type`` where ``device = torch.device("cuda")``.
        if isinstance(node, ast.Attribute) and node.attr == "type" and isinstance(node.value, ast.Name):
            bound = self.ctx.binding(node.value)
            if isinstance(bound, ast.Call) and self.ctx.qualname(bound.func) == "torch.device" and bound.args:
                return self.device_of(bound.args[0], depth + 1)
        return None

    def flag_of(self, node: ast.AST | object) -> bool | None:
        """A boolean argument's value: None when the user can change it (argparse) or unknown."""
        if node is MISSING:
            return True
        if node is UNKNOWN or not isinstance(node, ast.AST):
            return None
        if isinstance(node, ast.Attribute):
            return None  # ``args.amp``: the command line decides
        value = self.ctx.value(node)
        if isinstance(value, (bool, int)) and not isinstance(value, str):
            return bool(value)
        return None

    # ------------------------------------------------------------------ autocast
    def _autocast_call(self, expr: ast.AST, depth: int = 0) -> tuple[ast.Call, str] | None:
        """The autocast call behind a context expression, and its qualified name.

        Follows a name bound once (``ctx = torch.autocast(...)``), a conditional with a null
        context on the other side, and ``functools.partial(torch.autocast, ...)`` (whose
        arguments are merged into the returned call).
        """
        if depth > 4:
            return None
        ctx = self.ctx
        if isinstance(expr, ast.Name):
            bound = ctx.binding(expr)
            return self._autocast_call(bound, depth + 1) if bound is not None else None
        if isinstance(expr, ast.IfExp):
            a = self._autocast_call(expr.body, depth + 1)
            b = self._autocast_call(expr.orelse, depth + 1)
            if a is not None and b is None and self._is_null_context(expr.orelse):
                return a
            if b is not None and a is None and self._is_null_context(expr.body):
                return b
            return None
        if not isinstance(expr, ast.Call):
            return None
        qn = ctx.qualname(expr.func)
        if qn in AUTOCAST_DEVICE:
            return expr, qn
        # ``amp_ctx = partial(torch.autocast, device_type="cuda")`` ... ``with amp_ctx():``
        partial: ast.expr | None = expr.func
        if isinstance(partial, ast.Name):
            partial = ctx.binding(partial)
        if isinstance(partial, ast.Call) and ctx.qualname(partial.func) == "functools.partial" and partial.args:
            inner = ctx.qualname(partial.args[0])
            if inner in AUTOCAST_DEVICE:
                merged = ast.Call(
                    func=partial.args[0],
                    args=[*partial.args[1:], *expr.args],
                    keywords=[*partial.keywords, *expr.keywords],
                )
                ast.copy_location(merged, expr)
                merged.end_lineno, merged.end_col_offset = expr.end_lineno, expr.end_col_offset
                return merged, inner
        return None

    def _is_null_context(self, expr: ast.AST) -> bool:
        if isinstance(expr, ast.Call):
            qn = self.ctx.qualname(expr.func)
            if qn in _NULL_CONTEXTS:
                return True
            name = dotted(expr.func)
            return name is not None and name.rsplit(".", 1)[-1] in {"nullcontext", "suppress"}
        return False

    def arg(self, call: ast.Call, qualname: str, name: str) -> ArgResult:
        return find_arg(call, name, AUTOCAST_SIGNATURES.get(qualname), self.ctx)

    def _describe(
        self, call: ast.Call, qn: str, site: ast.expr, with_stmt: ast.With | ast.AsyncWith | None, scope: ast.AST
    ) -> Autocast:
        device = AUTOCAST_DEVICE[qn]
        if device is None:
            device = self.device_of(self.arg(call, qn, "device_type"))
        dtype_arg = self.arg(call, qn, "dtype")
        if dtype_arg is MISSING:
            if device is not None:
                dtype = _DEFAULT_DTYPE.get(device)
            elif self.ctx.targets_cuda:
                dtype = FLOAT16  # device unknown, but this script runs on CUDA
            else:
                dtype = None
        else:
            dtype = self.dtype_of(dtype_arg)
        enabled = self.flag_of(self.arg(call, qn, "enabled"))
        return Autocast(call, site, with_stmt, qn, device, dtype, enabled, scope)

    @cached_property
    def autocasts(self) -> list[Autocast]:
        """Every autocast region in the file (``with`` items and decorators), in source order."""
        ctx = self.ctx
        if not self.file_uses_autocast:
            return []
        out: list[Autocast] = []
        for stmt in ctx.of(ast.With, ast.AsyncWith):
            for item in stmt.items:
                found = self._autocast_call(item.context_expr)
                if found is not None:
                    call, qn = found
                    out.append(self._describe(call, qn, item.context_expr, stmt, self.scope(stmt)))
        for fn in ctx.of(ast.FunctionDef, ast.AsyncFunctionDef):
            for deco in fn.decorator_list:
                found = self._autocast_call(deco)
                if found is not None:
                    call, qn = found
                    out.append(self._describe(call, qn, deco, None, fn))
        out.sort(key=lambda a: pos(a.site))
        return out

    @cached_property
    def file_uses_autocast(self) -> bool:
        """Cheap pre-filter: the file calls or names an autocast entry point."""
        names = self.ctx.called_names
        if any(q in names for q in AUTOCAST_DEVICE):
            return True
        return "functools.partial" in names and self.ctx.mentions(*AUTOCAST_DEVICE)

    def with_autocasts(self) -> list[Autocast]:
        return [a for a in self.autocasts if a.with_stmt is not None]

    def inside(self, node: ast.AST, region: Autocast) -> bool:
        """Whether ``node`` runs lexically inside the body of ``region``'s ``with`` block."""
        stmt = region.with_stmt
        if stmt is None or not stmt.body:
            return False
        if not (pos(stmt.body[0]) <= pos(node) and end_pos(node) <= end_pos(stmt)):
            return False
        return self.scope(node) is region.scope

    # ------------------------------------------------------------------ scalers
    @cached_property
    def scaler_constructions(self) -> list[ScalerConstruction]:
        ctx = self.ctx
        out: list[ScalerConstruction] = []
        for qn in sorted(GRAD_SCALERS):
            for call in ctx.calls_to(qn):
                target = None
                parent = ctx.parent(call)
                if isinstance(parent, ast.Assign) and len(parent.targets) == 1:
                    target = dotted(parent.targets[0])
                elif isinstance(parent, ast.AnnAssign):
                    target = dotted(parent.target)
                if qn in ("torch.amp.GradScaler", "torch.GradScaler"):
                    signature = ("device", *GRAD_SCALER_SIGNATURE)
                else:
                    signature = GRAD_SCALER_SIGNATURE
                enabled = self.flag_of(find_arg(call, "enabled", signature, ctx))
                out.append(ScalerConstruction(call, qn, target, enabled))
        out.sort(key=lambda s: pos(s.call))
        return out

    @cached_property
    def scaler_names(self) -> frozenset[str]:
        """Dotted names assigned a GradScaler somewhere in the file."""
        return frozenset(s.target for s in self.scaler_constructions if s.target)

    def inert_scaler(self, text: str | None, scope: ast.AST) -> bool:
        """Whether ``text`` is a GradScaler the file makes inert: every construction assigned to
        that name passes ``enabled=False`` (its ``scale()`` returns the loss unchanged), and in
        ``scope`` the name is not a parameter (a caller's scaler may be another one)."""
        if text is None:
            return False
        if text.split(".", 1)[0] in _parameters(scope):
            return "." not in text and self._inert_argument(text, scope)
        ctx = self.ctx
        # constructions in a branch the defaults do not take (``if cfg.FSDP.ENABLED:``) do not run
        mine = [s for s in self.scaler_constructions if s.target == text and not self._skipped(s.call)]
        if not mine or any(s.enabled is not False for s in mine):
            return False
        # the name is bound by those constructions alone (not also from a helper or a config)
        head = text.split(".", 1)[0]
        if "." not in text:
            bound = [
                n for n in ctx.of(ast.Name) if n.id == head and isinstance(n.ctx, ast.Store) and not self._skipped(n)
            ]
            return len(bound) == len(mine)
        return True

    def _skipped(self, node: ast.AST) -> bool:
        """Whether ``node`` sits in a branch the defaults do not take, decided by a switch that no
        autocast's ``enabled=`` reads: ``if args.amp: scaler = GradScaler()`` goes with
        ``autocast(enabled=args.amp)`` (both on or both off), ``if cfg.FSDP.ENABLED:`` does not."""
        from traindoctor.static.branches import not_taken_by_default

        if not not_taken_by_default(self.ctx, node):
            return False
        switches: set[str] = set()
        for region in self.autocasts:
            flag = self.arg(region.call, region.qualname, "enabled")
            if isinstance(flag, ast.expr):
                switches |= _reads(flag)
        for anc in self.ctx.ancestors(node):
            if isinstance(anc, (ast.If, ast.IfExp)) and _reads(anc.test) & switches:
                return False
        return True

    def _inert_argument(self, param: str, fn: ast.AST, depth: int = 0) -> bool:
        """Whether every call of the file's function ``fn`` (by its name) passes an inert
        GradScaler for its parameter ``param`` (``train(..., scaler)`` called with the scaler
        ``run()`` constructs with ``enabled=False``)."""
        from traindoctor.static.callees import argument_for

        if depth > 2 or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return False
        sites = [c for c in self.ctx.of(ast.Call) if isinstance(c.func, ast.Name) and c.func.id == fn.name]
        if not sites:
            return False
        for call in sites:
            passed = argument_for(self.ctx, fn, call, param)  # ``train(*params)`` of a spelled-out tuple too
            text = dotted(passed) if passed is not None else None
            if text is None:
                return False
            caller = self.scope(call)
            if text.split(".", 1)[0] in _parameters(caller):
                if "." in text or not self._inert_argument(text, caller, depth + 1):
                    return False
            elif not self.inert_scaler(text, caller):
                return False
        return True

    def live_scaler_used_in(self, scope: ast.AST) -> bool:
        """:meth:`scaler_used_in` with the file's inert GradScalers (:meth:`inert_scaler`) left out."""
        if not any(self.inert_scaler(s.target, scope) for s in self.scaler_constructions):
            return self.scaler_used_in(scope)
        if any(b.kind == "wrapper" for b in self.backwards_in(scope)):
            return True
        if any(b.kind == "scaled" and not self.inert_scaler(b.scaler, scope) for b in self.backwards_in(scope)):
            return True
        ctx = self.ctx
        for call in ctx.method_calls("scale"):
            name = dotted(receiver(call))
            if self.scope(call) is scope and self.is_scaler(name) and not self.inert_scaler(name, scope):
                return True
        for node in ctx.walk(scope):
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                text = dotted(node)
                if text is None or not is_scaler_name(text) or ctx.qualname(node) in GRAD_SCALERS:
                    continue
                if self.scope(node) is scope and not self.inert_scaler(text, scope):
                    return True
        return False

    def is_scaler(self, text: str | None) -> bool:
        """Whether a dotted name is a GradScaler by construction in the file or by its name."""
        if text is None:
            return False
        if text in self.scaler_names:
            return True
        last = text.rsplit(".", 1)[-1]
        return is_scaler_name(text) or any(n.rsplit(".", 1)[-1] == last for n in self.scaler_names)

    # ------------------------------------------------------------------ backward
    @cached_property
    def backwards(self) -> list[Backward]:
        ctx = self.ctx
        out: list[Backward] = []
        for call in ctx.method_calls("backward"):
            func = call.func
            assert isinstance(func, ast.Attribute)
            recv = func.value
            if ctx.qualname(func) == "torch.autograd.backward":
                out.append(Backward(call, "direct", call.args[0] if call.args else None, None, self))
            elif isinstance(recv, ast.Call) and isinstance(recv.func, ast.Attribute) and recv.func.attr == "scale":
                loss = recv.args[0] if recv.args else None
                out.append(Backward(call, "scaled", loss, dotted(recv.func.value), self))
            elif call.args:
                # ``accelerator.backward(loss)``: the framework scales the loss only when it was
                # told to use float16 (``Accelerator(mixed_precision="fp16")``).
                kind = "direct" if framework_backward_unscaled(ctx, recv) else "wrapper"
                out.append(Backward(call, kind, call.args[0], None, self))
            else:
                out.append(Backward(call, "direct", recv, None, self))
        return out

    def backwards_in(self, scope: ast.AST) -> list[Backward]:
        return [b for b in self.backwards if b.scope is scope]

    def scaler_used_in(self, scope: ast.AST) -> bool:
        """Whether ``scope`` scales its loss: ``scaler.scale(...)``, a framework backward, or
        any use of an object that reads like a loss scaler (``loss_scaler(loss, optimizer)``)."""
        if any(b.kind != "direct" for b in self.backwards_in(scope)):
            return True
        ctx = self.ctx
        for call in ctx.method_calls("scale"):
            if self.scope(call) is scope and self.is_scaler(dotted(receiver(call))):
                return True
        for node in ctx.walk(scope):
            if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Load):
                text = dotted(node)
                if text is not None and is_scaler_name(text) and ctx.qualname(node) not in GRAD_SCALERS:
                    if self.scope(node) is scope:
                        return True
        return False

    # ------------------------------------------------------------------ loss flow
    def _assignments_in(self, scope: ast.AST) -> list[tuple[list[str], ast.expr | None, ast.AST]]:
        """(target names, value, statement) for each assignment whose scope is ``scope``."""
        out = []
        for node in self.ctx.of(ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr):
            if self.scope(node) is not scope:
                continue
            if isinstance(node, ast.Assign):
                targets = node.targets
            else:
                targets = [node.target]
            names: list[str] = []
            for t in targets:
                names.extend(_target_names(t))
            value = node.value
            if isinstance(node, ast.AugAssign):
                # ``loss += aux``: the old value flows too, keep it tainted.
                value = ast.BinOp(left=node.target, op=node.op, right=node.value)
            out.append((names, value, node))
        for node in self.ctx.of(ast.For, ast.AsyncFor):
            if self.scope(node) is scope:
                out.append((_target_names(node.target), node.iter, node))
        return out

    def tainted(self, region: Autocast) -> frozenset[str]:
        """Names whose values come from computations inside ``region`` (two hops of flow)."""
        key = id(region.call)
        cached = self._taint_cache.get(key)
        if cached is not None:
            return cached
        names: set[str] = set()
        assigns = self._assignments_in(region.scope)
        for targets, _value, stmt in assigns:
            if self.inside(stmt, region):
                names.update(targets)
        for _ in range(3):  # loops carry values backwards too; a few passes reach a fixpoint
            before = len(names)
            for targets, value, stmt in assigns:
                if value is not None and not self.inside(stmt, region) and mentions(value) & names:
                    names.update(targets)
            if len(names) == before:
                break
        result = frozenset(names)
        self._taint_cache[key] = result
        return result

    def flows_from(self, region: Autocast, expr: ast.AST | None, at: ast.AST) -> bool:
        """Whether ``expr`` (evaluated at ``at``) is computed from values made inside ``region``."""
        if self.inside(at, region):
            return True
        if expr is None:
            return False
        return bool(mentions(expr) & self.tainted(region))


def _target_names(target: ast.AST) -> list[str]:
    if isinstance(target, (ast.Tuple, ast.List)):
        out: list[str] = []
        for elt in target.elts:
            out.extend(_target_names(elt.value if isinstance(elt, ast.Starred) else elt))
        return out
    if isinstance(target, ast.Subscript):
        target = target.value
    text = dotted(target)
    return [text] if text else []


def _reads(expr: ast.AST) -> set[str]:
    """The whole names and attribute paths ``expr`` reads (``cfg.FSDP.ENABLED``, not ``cfg``)."""
    inner = {id(n.value) for n in ast.walk(expr) if isinstance(n, ast.Attribute)}
    return {
        text
        for n in ast.walk(expr)
        if isinstance(n, (ast.Name, ast.Attribute)) and id(n) not in inner and (text := dotted(n)) is not None
    }


def mentions(expr: ast.AST) -> set[str]:
    """Dotted names read in ``expr`` (``outputs.loss`` gives ``outputs.loss`` and ``outputs``)."""
    out: set[str] = set()
    for node in ast.walk(expr):
        if isinstance(node, (ast.Name, ast.Attribute)):
            text = dotted(node)
            if text:
                out.add(text)
    return out


def exclusive(ctx: FileContext, a: ast.AST, b: ast.AST) -> bool:
    """Whether ``a`` and ``b`` sit in different branches of one ``if`` (never both run)."""
    branches: dict[int, str] = {}
    for node, anc in _with_parents(ctx, a):
        if isinstance(anc, ast.If):
            branches[id(anc)] = _branch(anc, node)
    for node, anc in _with_parents(ctx, b):
        if isinstance(anc, ast.If) and id(anc) in branches:
            return branches[id(anc)] != _branch(anc, node)
    return False


def _with_parents(ctx: FileContext, node: ast.AST) -> Iterator[tuple[ast.AST, ast.AST]]:
    child = node
    for anc in ctx.ancestors(node):
        yield child, anc
        child = anc


def _branch(stmt: ast.If, child: ast.AST) -> str:
    if child in stmt.body:
        return "body"
    if child in stmt.orelse:
        return "orelse"
    return "test"


def amp_facts(ctx: FileContext) -> AmpFacts:
    """The (cached) mixed-precision analysis of one file."""
    return ctx.shared("amp", AmpFacts)


# ---------------------------------------------------------------------- modules vs tensors
#: Methods that return the same module (``model.cuda().half()``): walked through to the root.
_MODULE_CHAIN = frozenset(
    {
        "to",
        "cuda",
        "cpu",
        "half",
        "float",
        "bfloat16",
        "double",
        "train",
        "eval",
        "requires_grad_",
        "type",
        "share_memory",
        "to_empty",
    }
)
_NOT_MODULES = frozenset({"torch.nn.Parameter", "torch.nn.parameter.Parameter", "torch.nn.Buffer"})


def chain_root(expr: ast.expr) -> ast.expr:
    """``Net().cuda().half()`` -> ``Net()``; ``model.to(dev)`` -> ``model``."""
    while isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and expr.func.attr in _MODULE_CHAIN:
        expr = expr.func.value
    return expr


class ModuleIndex:
    """Which names in a file hold an ``nn.Module`` (as opposed to a tensor).

    Evidence, any of: the name is bound to a module constructor (a ``torch.nn`` layer, a
    torchvision/timm/transformers model, or a class defined in the file that subclasses
    ``nn.Module``), or the file calls ``.parameters()`` / ``.named_parameters()`` /
    ``.modules()`` on it. Tensors have none of these.
    """

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        self.module_classes = self._module_classes()
        self.with_parameters = {
            text
            for attr in ("parameters", "named_parameters", "modules", "children")
            for call in ctx.method_calls(attr)
            if (text := dotted(receiver(call))) is not None
        }

    def _module_classes(self) -> set[str]:
        classes = self.ctx.of(ast.ClassDef)
        found: set[str] = set()
        for _ in range(len(classes) + 1):
            before = len(found)
            for cls in classes:
                if cls.name in found:
                    continue
                for base in cls.bases:
                    qn = self.ctx.qualname(base)
                    if (qn is not None and self._is_module_qualname(qn)) or (
                        isinstance(base, ast.Name) and base.id in found
                    ):
                        found.add(cls.name)
                        break
            if len(found) == before:
                break
        return found

    @staticmethod
    def _is_module_qualname(qn: str) -> bool:
        if qn in _NOT_MODULES:
            return False
        last = qn.rsplit(".", 1)[-1]
        if qn.startswith("torch.nn.") and last[:1].isupper() and ".functional." not in qn:
            return True
        if qn.startswith("torchvision.models.") and not last.startswith(("get_", "list_")):
            return True  # resnet50(), vit_b_16(), ResNet(...)
        if qn in ("timm.create_model", "timm.models.create_model"):
            return True
        if qn.startswith("transformers.") and last == "from_pretrained":
            owner = qn.rsplit(".", 2)[-2]
            return "Model" in owner or "For" in owner
        return False

    def constructs_module(self, call: ast.AST) -> bool:
        if not isinstance(call, ast.Call):
            return False
        qn = self.ctx.qualname(call.func)
        if qn is not None and self._is_module_qualname(qn):
            return True
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "from_pretrained":
            func = func.value
        return isinstance(func, ast.Name) and func.id in self.module_classes

    def is_module(self, expr: ast.expr) -> bool:
        root = chain_root(expr)
        if isinstance(root, ast.Call):
            return self.constructs_module(root)
        text = dotted(root)
        if text is None:
            return False
        if text in self.with_parameters:
            return True
        for value in self.values_of(root, text):
            if self.constructs_module(chain_root(value)):
                return True
        return False

    def values_of(self, node: ast.expr, text: str) -> list[ast.expr]:
        """Expressions assigned to a name (its scope) or an attribute (anywhere in the file)."""
        if isinstance(node, ast.Name):
            return [v for v in (self.ctx.bindings_of(node) or []) if v is not None]
        out = []
        for assign in self.ctx.of(ast.Assign):
            if any(dotted(t) == text for t in assign.targets):
                out.append(assign.value)
        return out
