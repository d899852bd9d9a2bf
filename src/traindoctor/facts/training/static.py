"""Static facts about training loops (TD207, TD208, TD704): which loops run backward and step
an optimizer, what they call, which helpers of the same file they reach.

A loop's body is read without the functions, lambdas and classes defined inside it (their code
runs only when called). Helpers are followed one level: a function of the file called by name
(``evaluate(model)``, ``self.validate()``) from the loop.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

Loop = ast.For | ast.AsyncFor | ast.While
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)


def own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node`` (itself excluded) outside nested functions, lambdas and classes."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        yield child
        if not isinstance(child, _SCOPES):
            stack.extend(ast.iter_child_nodes(child))


def own_calls(node: ast.AST) -> list[ast.Call]:
    """The calls in ``node``'s own code, in source order."""
    calls = [n for n in own_nodes(node) if isinstance(n, ast.Call)]
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    return calls


def method_name(call: ast.Call) -> str | None:
    """``x.attr(...)`` -> ``"attr"``."""
    return call.func.attr if isinstance(call.func, ast.Attribute) else None


def is_backward(call: ast.Call) -> bool:
    """``loss.backward()``, ``accelerator.backward(loss)``, ``self.manual_backward(loss)``."""
    return method_name(call) in ("backward", "manual_backward")


def runs_backward(node: ast.AST) -> bool:
    return any(is_backward(c) for c in own_calls(node))


def file_functions(ctx: FileContext) -> dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Functions and methods of the file by name."""

    def build(c: FileContext) -> dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]:
        out: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        for fn in c.of(*_FUNCS):
            out.setdefault(fn.name, []).append(fn)
        return out

    return ctx.shared("training.file_functions", build)


def called_helpers(ctx: FileContext, node: ast.AST) -> list[tuple[ast.Call, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(call site, function) for each call in ``node``'s own code of a function of the file
    (``f(...)`` or ``self.f(...)``); a name defined more than once is left out."""
    functions = file_functions(ctx)
    out = []
    for call in own_calls(node):
        func = call.func
        if isinstance(func, ast.Name):
            name = func.id
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            name = func.attr
        else:
            continue
        found = functions.get(name, [])
        if len(found) == 1:
            out.append((call, found[0]))
    return out


def enclosing_loops(ctx: FileContext, node: ast.AST) -> list[Loop]:
    """The loops around ``node`` inside its function, innermost first."""
    return [n for n in ctx.enclosing_loops(node) if isinstance(n, (ast.For, ast.AsyncFor, ast.While))]


def training_loop_of(ctx: FileContext, node: ast.AST) -> Loop | None:
    """The innermost loop around ``node`` (in its function) whose own code runs backward."""
    for loop in enclosing_loops(ctx, node):
        if runs_backward(loop):
            return loop
    return None


def calls_method(node: ast.AST, attr: str, *, helpers: list[ast.AST] | None = None) -> bool:
    """Whether ``node``'s own code (or one of ``helpers``) calls ``<anything>.attr(...)``."""
    for region in [node, *(helpers or [])]:
        if any(method_name(c) == attr for c in own_calls(region)):
            return True
    return False


def accumulation_divisor(ctx: FileContext, loop: ast.AST, backward: ast.Call) -> ast.expr | None:
    """The divisor of :func:`accumulation_step`'s ``if``."""
    step = accumulation_step(ctx, loop, backward)
    return step[1] if step is not None else None


def accumulation_step(ctx: FileContext, loop: ast.AST, backward: ast.Call) -> tuple[ast.If, ast.expr] | None:
    """The ``if ... % k == 0:`` in ``loop``'s own code that steps an optimizer every ``k``
    backward passes of ``backward``, and ``k``: not containing ``backward``, on its path (not
    the other arm of an ``if`` around both: ``if accum > 1: ... else: loss.backward();
    optimizer.step()``), and no optimizer step runs unconditionally after ``backward`` on its
    way through the loop's body (``q_loss.backward(); q_opt.step()`` beside a delayed
    ``if step % 2 == 0:`` actor update accumulates nothing)."""
    from traindoctor.facts.batching.static import is_optimizer_step, modulo_divisor
    from traindoctor.facts.data.training import exclusive_branches

    if _steps_after(ctx, loop, backward, is_optimizer_step):
        return None
    for node in own_nodes(loop):
        if not isinstance(node, ast.If) or ctx.within(backward, node):
            continue
        divisor = modulo_divisor(node.test)
        if divisor is None or (isinstance(divisor, ast.Constant) and divisor.value in (0, 1)):
            continue
        if any(is_optimizer_step(ctx, s) for s in node.body) and not exclusive_branches(ctx, backward, node):
            return node, divisor
    return None


def _steps_after(ctx: FileContext, loop: ast.AST, call: ast.AST, is_step: Callable[..., bool]) -> bool:
    """Whether an optimizer step statement follows ``call`` unconditionally: later in the block
    holding it, or in a block around that one, up to ``loop``'s body."""
    node, parent = call, ctx.parent(call)
    while parent is not None and node is not loop:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and node in block:
                if any(is_step(ctx, stmt) for stmt in block[block.index(node) + 1 :]):
                    return True
                break
        if parent is loop:
            return False
        node, parent = parent, ctx.parent(parent)
    return False
