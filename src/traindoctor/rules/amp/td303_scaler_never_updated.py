"""TD303 scaler-never-updated: ``scaler.step()`` with no ``scaler.update()``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
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
        an argument), which may update it.
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
                    self.scaler.step(self.opt_g)  # TD303
                    self.scaler.step(self.opt_d)  # TD303
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
            yield ctx.report(
                self,
                call,
                f"`{name}.step()` is never followed by `{name}.update()`; call `{name}.update()` "
                "once per iteration after the optimizer steps.",
                help=f"Call `{name}.update()` after `{name}.step(...)`",
            )

    @staticmethod
    def _passed_as_argument(ctx: FileContext) -> set[str]:
        """Last components of names handed to other calls (``helper(scaler)``, ``return scaler``)."""
        out: set[str] = set()
        for call in ctx.of(ast.Call):
            for arg in [*call.args, *(kw.value for kw in call.keywords)]:
                if isinstance(arg, ast.Starred):
                    arg = arg.value
                name = dotted(arg)
                if name is not None:
                    out.add(_last(name))
        for ret in ctx.of(ast.Return):
            if ret.value is not None and (name := dotted(ret.value)) is not None:
                out.add(_last(name))
        return out
