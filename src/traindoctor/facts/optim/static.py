"""Which calls of a file build an optimizer, and of which class, however the class is named.

``torch.optim.AdamW(...)`` names its class; real training code often does not:

* a name bound to the class, perhaps in branches (``optimizer_cls = bnb.optim.AdamW8bit`` under
  ``if args.use_8bit_adam:``, else ``torch.optim.AdamW``), or to a conditional expression;
* ``getattr(torch.optim, args.optimizer)`` with the option's default known;
* a dict of classes indexed by a key (``OPTIMIZERS[args.opt]``): the entry the key's known value
  names, else every entry.

Each construction is an :class:`OptimizerCall` with every class it may build. A branch the
file's defaults do not take (a ``store_true`` option) does not count; an alternative that is no
known optimizer class makes the call unknown (it is left out).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from traindoctor.static.args import UNKNOWN
from traindoctor.static.branches import not_taken_by_default
from traindoctor.static.names import OPTIMIZERS

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: Optimizer classes outside ``torch.optim`` that take ``params`` first and a ``weight_decay``
#: keyword with the meaning torch's have (bitsandbytes' 8-bit and paged variants).
LIBRARY_OPTIMIZERS = frozenset(
    {
        "bitsandbytes.optim.AdamW",
        "bitsandbytes.optim.AdamW8bit",
        "bitsandbytes.optim.AdamW32bit",
        "bitsandbytes.optim.PagedAdamW",
        "bitsandbytes.optim.PagedAdamW8bit",
        "bitsandbytes.optim.PagedAdamW32bit",
        "bitsandbytes.optim.Adam",
        "bitsandbytes.optim.Adam8bit",
        "bitsandbytes.optim.Adam32bit",
        "bitsandbytes.optim.PagedAdam",
        "bitsandbytes.optim.PagedAdam8bit",
    }
)
#: Optimizer classes whose ``weight_decay`` default is not zero (torch's and bitsandbytes' AdamW).
DEFAULT_DECAY: dict[str, float] = {
    "torch.optim.AdamW": 0.01,
    **{q: 0.01 for q in LIBRARY_OPTIMIZERS if q.rsplit(".", 1)[-1].startswith(("AdamW", "PagedAdamW"))},
}
_KNOWN = OPTIMIZERS | LIBRARY_OPTIMIZERS
_DEPTH = 4


@dataclass(frozen=True)
class OptimizerCall:
    """One optimizer construction and the classes it may build (one or more, all known)."""

    call: ast.Call
    classes: frozenset[str]

    @property
    def name(self) -> str:
        """The class's short name for messages (the first, when several)."""
        return sorted(self.classes)[0].rsplit(".", 1)[-1]

    @property
    def torch_class(self) -> str | None:
        """The one ``torch.optim`` class it builds (None: several, or another library's)."""
        if len(self.classes) == 1:
            (qn,) = self.classes
            return qn if qn in OPTIMIZERS else None
        return None

    def arg(self, ctx: FileContext, name: str) -> Any:
        """The expression passed for ``name`` (see ``FileContext.arg``): positional arguments are
        read by the class's signature when it is one torch class, else only ``params`` (first)."""
        torch_class = self.torch_class
        if torch_class is not None:
            return ctx.arg(self.call, name, torch_class)
        if name == "params" and self.call.args and not isinstance(self.call.args[0], ast.Starred):
            return self.call.args[0]
        return ctx.arg(self.call, name, "")

    def default_decay(self) -> Any:
        """The ``weight_decay`` the classes use when none is passed (UNKNOWN when they disagree)."""
        values = {DEFAULT_DECAY.get(q, 0) for q in self.classes}
        return values.pop() if len(values) == 1 else UNKNOWN


def optimizer_calls(ctx: FileContext) -> list[OptimizerCall]:
    """Every optimizer construction of the file (see the module docs), in source order."""
    return ctx.shared("optim.optimizer_calls", _optimizer_calls)


def _optimizer_calls(ctx: FileContext) -> list[OptimizerCall]:
    out: list[OptimizerCall] = []
    for qn, call in ctx.calls_to_prefix(""):
        if qn in _KNOWN:
            out.append(OptimizerCall(call, frozenset({qn})))
    seen = {id(o.call) for o in out}
    for call in ctx.of(ast.Call):
        func = call.func
        if id(call) in seen or not isinstance(func, (ast.Name, ast.Subscript, ast.Call)):
            continue
        if isinstance(func, ast.Name) and (func.id in ctx.imports.names or ctx.qualname(func) is not None):
            continue
        classes = classes_of(ctx, func)
        if classes:
            out.append(OptimizerCall(call, classes))
    out.sort(key=lambda o: (o.call.lineno, o.call.col_offset))
    return out


def classes_of(ctx: FileContext, expr: ast.AST, depth: int = 0) -> frozenset[str] | None:
    """The optimizer classes ``expr`` may evaluate to, all of them known; else None."""
    if depth > _DEPTH:
        return None
    qn = ctx.qualname(expr)
    if qn in _KNOWN:
        return frozenset({qn})
    if isinstance(expr, ast.Name):
        if expr.id in ctx.imports.names:
            return None
        bound = [v for v in ctx.bindings_of(expr) or [None] if v is None or not not_taken_by_default(ctx, v)]
        if not bound or any(v is None for v in bound):
            return None
        return _union([classes_of(ctx, v, depth + 1) for v in bound if v is not None])
    if isinstance(expr, ast.IfExp):
        test = ctx.value(expr.test)
        if isinstance(test, bool):
            return classes_of(ctx, expr.body if test else expr.orelse, depth + 1)
        return _union([classes_of(ctx, expr.body, depth + 1), classes_of(ctx, expr.orelse, depth + 1)])
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "getattr":
        # ``getattr(torch.optim, args.optimizer)``: the option's known value names the class
        if len(expr.args) != 2 or expr.keywords or ctx.qualname(expr.args[0]) != "torch.optim":
            return None
        name = ctx.value(expr.args[1])
        return frozenset({f"torch.optim.{name}"}) if f"torch.optim.{name}" in OPTIMIZERS else None
    if isinstance(expr, ast.Subscript):
        table = ctx.dict_literal(expr.value)
        if not table:
            return None
        key = ctx.value(expr.slice)
        if isinstance(key, str):
            return classes_of(ctx, table[key], depth + 1) if key in table else None
        return _union([classes_of(ctx, v, depth + 1) for v in table.values()])
    return None


def _union(found: list[frozenset[str] | None]) -> frozenset[str] | None:
    if not found or any(f is None for f in found):
        return None
    return frozenset().union(*(f for f in found if f is not None))
