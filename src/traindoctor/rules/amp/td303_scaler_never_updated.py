"""TD303 scaler-never-updated: ``scaler.step()`` with no ``scaler.update()``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Related, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.names import dotted, receiver

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


def _last(text: str) -> str:
    return text.rsplit(".", 1)[-1]


class ScalerNeverUpdated(Rule):
    code = "TD303"
    name = "scaler-never-updated"
    severity = Severity.ERROR
    summary = (
        "`scaler.step()` is called but `scaler.update()` never is, so the loss scale never adapts; "
        "call `scaler.update()` after every `scaler.step(optimizer)`."
    )
    gpu_only = False
    static = True
    triggers = ("GradScaler", ".scale(")
    runtime = False
    fixable = "never"

    what_it_does = """
        Finds `scaler.step(optimizer)` on a GradScaler (constructed in the file, or used with
        `scaler.scale(loss)` in the same function) when no `update()` is called on that scaler
        anywhere in the file. It stays silent when the scaler is handed to other code (passed as
        an argument), which may update it. Where the function that steps the scaler also updates
        it, every path from the `step()` must reach an `update()`: one under a condition without
        an `else` (`if scale < limit: scaler.update()`), or in one branch only, is reported at the
        `step()` with the conditional update as the related location.
    """
    why_bad = """
        `GradScaler.update()` is where the loss scale adapts: it halves the scale after a step
        whose gradients overflowed and grows it after `growth_interval` clean steps. It also
        resets the per-optimizer state that `step()` and `unscale_()` record. Without it the
        scale never shrinks, so every overflowing step stays skipped, and PyTorch raises a
        `RuntimeError` ("unscale_() has already been called...") as soon as the same optimizer
        is stepped or unscaled a second time. Code that only runs the loop once in testing
        can ship with the bug.
    """
    example = """
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        optimizer.zero_grad()
    """
    use_instead = """
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    """
    references = (
        "https://pytorch.org/docs/stable/amp.html#torch.amp.GradScaler.update",
        "https://pytorch.org/docs/stable/notes/amp_examples.html",
    )

    valid = (
        Valid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = criterion(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            """
        ),
        Valid(
            """
            import torch

            class Trainer:
                def __init__(self):
                    self.scaler = torch.amp.GradScaler("cuda")

                def optimizer_step(self):
                    self.scaler.step(self.optimizer)

                def end_of_step(self):
                    self.scaler.update()
            """
        ),
        Valid(
            """
            def train_step(loss, optimizer, scaler):
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                finish_step(scaler)   # updated elsewhere
            """
        ),
        Valid(
            """
            import torch

            def train_epoch(model, optimizer, grad_scaler):
                for x in loader:
                    grad_scaler.scale(model(x).mean()).backward()
                    finish(optimizer, grad_scaler)

            def finish(optimizer, s):
                s.step(optimizer)
                s.update()

            scaler = torch.amp.GradScaler("cuda")
            train_epoch(model, optimizer, scaler)
            """
        ),
        Valid(
            """
            # An LR scheduler's step is not a GradScaler's.
            scheduler.step()
            optimizer.step()
            """
        ),
    )

    invalid = (
        Invalid(
            """
            import torch

            class AmpOptimizer:
                def __init__(self, optimizer):
                    self.optimizer = optimizer
                    self.scaler = torch.amp.GradScaler("cuda")

                def step(self, loss):
                    self.scaler.scale(loss).backward()
                    self.scaler.step(self.optimizer)  # TD303
                    if self.scaler.get_scale() < 32768.0:  # the update is skipped above that
                        self.scaler.update()
            """
        ),
        Invalid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda")
            for x, y in loader:
                optimizer.zero_grad()
                with torch.autocast("cuda"):
                    loss = criterion(model(x), y)
                scaler.scale(loss).backward()
                scaler.step(optimizer)  # TD303
            """
        ),
        Invalid(
            """
            from torch.cuda.amp import GradScaler as Scaler

            gs = Scaler(init_scale=1024)

            def train_step(loss):
                gs.scale(loss).backward()
                gs.step(opt)  # TD303
                opt.zero_grad()
            """
        ),
        Invalid(
            """
            def train_step(model, batch, optimizer, grad_scaler):
                loss = model(batch).mean()
                grad_scaler.scale(loss).backward()
                grad_scaler.unscale_(optimizer)
                grad_scaler.step(optimizer)  # TD303
                optimizer.zero_grad(set_to_none=True)
            """
        ),
        Invalid(
            """
            import torch

            class Trainer:
                def __init__(self):
                    self.scaler = torch.amp.GradScaler()

                def step(self, loss):
                    self.scaler.scale(loss).backward()
                    self.scaler.step(self.opt_g)
                    self.scaler.step(self.opt_d)  # TD303
            """
        ),
        Invalid(
            """
            import torch

            def train_and_evaluate(nets, optims, scaler):
                for x in loader:
                    scaler.scale(nets[1](x).mean()).backward()
                    scaler.step(optims[1])
                    scaler.scale(nets[0](x).mean()).backward()
                    scaler.step(optims[0])  # TD303

            scaler = torch.amp.GradScaler("cuda")
            train_and_evaluate([net_g, net_d], [optim_g, optim_d], scaler)
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        from traindoctor.facts.amp.static import amp_facts

        steps = ctx.method_calls("step")
        if not steps:
            return
        facts = amp_facts(ctx)
        if not facts.scaler_constructions and not ctx.method_calls("scale"):
            return  # neither a GradScaler nor ``x.scale(...)``: no scaler in this file
        scaled_in: dict[str, set[int]] = {}
        for b in facts.backwards:
            if b.kind == "scaled" and b.scaler:
                scaled_in.setdefault(b.scaler, set()).add(id(b.scope))
        for call in ctx.method_calls("scale"):
            name = dotted(receiver(call))
            if name and facts.is_scaler(name):
                scaled_in.setdefault(name, set()).add(id(facts.scope(call)))
        updated = {_last(name) for call in ctx.method_calls("update") if (name := dotted(receiver(call))) is not None}
        handed_on: set[str] | None = None
        missing: dict[tuple[str, int], list[ast.Call]] = {}
        for call in steps:
            name = dotted(receiver(call))
            if name is None or _last(name) in updated:
                continue
            constructed = name in facts.scaler_names
            scaled_here = id(facts.scope(call)) in scaled_in.get(name, set())
            if not (constructed or scaled_here):
                continue
            if handed_on is None:
                handed_on = self._passed_as_argument(ctx)
            if _last(name) in handed_on:
                continue
            missing.setdefault((name, id(facts.scope(call))), []).append(call)
        yield from self._skipped_on_a_path(ctx, steps, updated, scaled_in)
        for (name, _), calls in missing.items():
            # one finding per scaler and function: one ``update()`` after its last step fixes all
            *others, last = sorted(calls, key=lambda c: (c.lineno, c.col_offset))
            yield ctx.report(
                self,
                last,
                f"`{name}.step()` is never followed by `{name}.update()`; call `{name}.update()` "
                "once per iteration after the optimizer steps.",
                help=f"Call `{name}.update()` after `{name}.step(...)`",
                related=tuple(
                    Related(ctx.filename, ctx.location(c), f"`{name}` also steps an optimizer here") for c in others
                ),
            )

    def _skipped_on_a_path(
        self, ctx: FileContext, steps: list[ast.Call], updated: set[str], scaled_in: dict[str, set[int]]
    ) -> Iterator[Finding]:
        """``scaler.step()`` followed by ``update()`` on some paths only (``if scale > limit:
        pass else: scaler.update()``): the next ``step()`` or ``unscale_()`` of that optimizer
        raises, and the scale stops adapting. Judged where the same function updates the same
        scaler (an update left to other code is not known here)."""
        from traindoctor.facts.amp.static import amp_facts

        facts = amp_facts(ctx)
        updates = [(c, dotted(receiver(c))) for c in ctx.method_calls("update")]
        reported: set[tuple[str, int]] = set()
        for call in steps:
            name = dotted(receiver(call))
            if name is None or _last(name) not in updated:
                continue
            scope = facts.scope(call)
            if not (name in facts.scaler_names or id(scope) in scaled_in.get(name, set())):
                continue
            mine = [u for u, n in updates if n == name and facts.scope(u) is scope]
            if not mine or (name, id(scope)) in reported or _updated_after(ctx, call, name):
                continue
            reported.add((name, id(scope)))
            yield ctx.report(
                self,
                call,
                f"`{name}.step()` is followed by `{name}.update()` on some paths only; call "
                f"`{name}.update()` after every `{name}.step(...)`, or the next step raises and the "
                "loss scale stops adapting.",
                help=f"Call `{name}.update()` on every path after `{name}.step(...)`",
                related=tuple(
                    Related(ctx.filename, ctx.location(u), f"`{name}` is updated here, under a condition") for u in mine
                ),
            )

    @staticmethod
    def _passed_as_argument(ctx: FileContext) -> set[str]:
        """Last components of names handed to other calls (``helper(scaler)``, ``return scaler``),
        except to a function of the project that neither updates the parameter it receives nor
        hands it on (``train_and_evaluate(..., scaler, ...)`` of this file, which only steps it)."""
        out: set[str] = set()
        for call in ctx.of(ast.Call):
            for arg in [*call.args, *(kw.value for kw in call.keywords)]:
                if isinstance(arg, ast.Starred):
                    arg = arg.value
                name = dotted(arg)
                if name is not None and not _kept_by_callee(ctx, call, arg):
                    out.add(_last(name))
        for ret in ctx.of(ast.Return):
            if ret.value is not None and (name := dotted(ret.value)) is not None:
                out.add(_last(name))
        return out


_BLOCKS = ("body", "orelse", "finalbody", "handlers")


def _updated_after(ctx: FileContext, step: ast.Call, name: str) -> bool:
    """Whether every path from ``step`` to the end of its function calls ``name.update()``
    (statements after it in its block, then after each enclosing statement; a loop around it also
    runs its body's earlier statements again). Loops, ``try`` handlers and conditions without an
    ``else`` may not run."""
    node: ast.AST = ctx.statement_of(step)
    while True:
        parent = ctx.parent(node)
        if parent is None or isinstance(parent, ast.Lambda):
            return False
        for field in _BLOCKS:
            block = getattr(parent, field, None)
            if isinstance(block, list) and node in block:
                index = block.index(node)
                if _must_update(block[index + 1 :], name):
                    return True
                if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)) and field == "body":
                    if _must_update(block[:index], name):
                        return True  # the next pass of the loop updates first
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            return False
        node = parent


def _must_update(stmts: list[ast.stmt], name: str) -> bool:
    return any(_stmt_updates(s, name) for s in stmts)


def _stmt_updates(stmt: ast.stmt, name: str) -> bool:
    """Whether running ``stmt`` always calls ``name.update()``."""
    if isinstance(stmt, ast.If):
        return _must_update(stmt.body, name) and _must_update(stmt.orelse, name)
    if isinstance(stmt, (ast.With, ast.AsyncWith)):
        return _must_update(stmt.body, name)
    if isinstance(stmt, ast.Try):
        return _must_update(stmt.body, name) or _must_update(stmt.finalbody, name)
    if isinstance(stmt, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return False
    for node in ast.walk(stmt):
        if isinstance(node, (ast.Lambda, ast.IfExp, ast.BoolOp)):
            return False
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "update"
            and dotted(node.func.value) == name
        ):
            return True
    return False


def _kept_by_callee(ctx: FileContext, call: ast.Call, arg: ast.expr, depth: int = 0) -> bool:
    """Whether ``call`` is to a function of this file or of another project module whose parameter
    receiving ``arg`` it never updates (``p.update()``) nor hands on other than to such functions
    (as an argument elsewhere, a ``return``, an assignment): the update is then missing."""
    found = _callee(ctx, call) if depth < 3 else None
    if found is None:
        return False
    where, fn = found
    a = fn.args
    if a.vararg is not None or a.kwarg is not None:
        return False
    params = [p.arg for p in [*a.posonlyargs, *a.args]]
    param = None
    for i, value in enumerate(call.args):
        if isinstance(value, ast.Starred):
            return False
        if value is arg and i < len(params):
            param = params[i]
    for kw in call.keywords:
        if kw.value is arg:
            param = kw.arg
    if param is None:
        return False
    methods = [
        n
        for n in ast.walk(fn)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == param
    ]
    if any(m.attr == "update" for m in methods):
        return False
    receivers = {id(m.value) for m in methods}
    passed = {
        id(value): sub
        for sub in ast.walk(fn)
        if isinstance(sub, ast.Call)
        for value in [*sub.args, *(k.value for k in sub.keywords)]
    }
    for use in ast.walk(fn):
        if not (isinstance(use, ast.Name) and use.id == param) or id(use) in receivers:
            continue
        inner = passed.get(id(use))
        if inner is None or not _kept_by_callee(where, inner, use, depth + 1):
            return False  # handed on to code that may update it
    return True


def _callee(ctx: FileContext, call: ast.Call) -> tuple[FileContext, ast.FunctionDef] | None:
    """The definition ``call`` calls and its file: a top-level function of this file, or one of
    another project module (through the project model); None when it cannot be told."""
    func = call.func
    if isinstance(func, ast.Name) and func.id not in ctx.imports.names:
        defs = [s for s in ctx.tree.body if isinstance(s, ast.FunctionDef) and s.name == func.id]
        if len(defs) == 1 and not any(
            isinstance(s, (ast.Assign, ast.ClassDef)) and func.id in {getattr(t, "id", "") for t in _bound(s)}
            for s in ctx.tree.body
        ):
            return ctx, defs[0]
        return None
    view = ctx.project
    if view is None or not isinstance(func, (ast.Name, ast.Attribute)) or not view.imports_project:
        return None
    resolved = view.resolve(func)
    if resolved is None or resolved.function is None or resolved.summary is None:
        return None
    module = resolved.project.module_context(resolved.summary) if resolved.project is not None else None
    if module is None:
        return None
    defs = [s for s in module.tree.body if isinstance(s, ast.FunctionDef) and s.name == resolved.name]
    return (module, defs[0]) if len(defs) == 1 else None


def _bound(stmt: ast.stmt) -> list[ast.AST]:
    if isinstance(stmt, ast.Assign):
        return list(stmt.targets)
    if isinstance(stmt, ast.ClassDef):
        return [ast.Name(id=stmt.name)]
    return []
