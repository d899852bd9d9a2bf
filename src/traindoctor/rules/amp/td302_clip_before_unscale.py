"""TD302 clip-before-unscale: gradients are clipped while still multiplied by the loss scale."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Fix, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.names import dotted, receiver

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch.amp import GradScaler
    from torch.optim import Optimizer

    from traindoctor.runtime.live import Site
    from traindoctor.static.context import FileContext


class ClipBeforeUnscale(Rule):
    code = "TD302"
    name = "clip-before-unscale"
    severity = Severity.ERROR
    summary = (
        "Gradients are clipped while still multiplied by the GradScaler's loss scale; "
        "call `scaler.unscale_(optimizer)` before clipping."
    )
    gpu_only = False
    static = True
    triggers = ("clip_grad",)
    runtime = True
    fixable = "sometimes"

    what_it_does = """
        Finds `torch.nn.utils.clip_grad_norm_` / `clip_grad_value_` called after
        `scaler.scale(loss).backward()` and before `scaler.step(optimizer)` in the same
        function, with no `scaler.unscale_(optimizer)` in between.
    """
    why_bad = """
        After `scaler.scale(loss).backward()` every `.grad` holds the true gradient times the
        current loss scale (65536 at the start, adjusted as training goes). Clipping those
        gradients to a norm of 1.0 compares the *scaled* norm with the threshold, so the clip
        either fires on every step (shrinking the real update by the scale factor, a
        near-zero learning rate) or, as the scale changes, clips by an amount that has nothing
        to do with the threshold you chose. `scaler.unscale_(optimizer)` divides the gradients
        in place first; `scaler.step` then knows they are already unscaled and does not divide
        them again.
    """
    example = """
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)
        scaler.update()
    """
    use_instead = """
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(optimizer)
        scaler.update()
    """
    fix_safety = """
        The fix inserts `<scaler>.unscale_(<optimizer>)` on its own line before the clipping
        statement, with the scaler and optimizer taken from the `scaler.step(...)` call that
        follows. It is offered only when those are plain names and the clip does not sit in a
        loop that the step is outside of (`unscale_` may run only once per optimizer per step).
        It is safe: the values passed to `scaler.step` are then the same ones the unscaled
        clip intended.
    """
    options = """
    No thresholds. At run time: a `clip_grad_norm_`/`clip_grad_value_` call between an enabled
    GradScaler's `scale()` and its `update()` with no `scaler.unscale_()` before it. A clipping
    function imported by name before `watch()` started is not seen (`traindoctor run` sees it).
    """
    references = (
        "https://pytorch.org/docs/stable/notes/amp_examples.html#gradient-clipping",
        "https://pytorch.org/docs/stable/amp.html#torch.amp.GradScaler.unscale_",
    )

    valid = (
        Valid(
            """
            import torch

            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            """
        ),
        Valid(
            """
            from torch.nn.utils import clip_grad_norm_

            def step(loss):
                if scaler is not None:
                    scaler.scale(loss).backward()
                    scaler.unscale_(optimizer)
                    clip_grad_norm_(model.parameters(), 1.0)
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    loss.backward()
                    clip_grad_norm_(model.parameters(), 1.0)
                    optimizer.step()
            """
        ),
        Valid(
            """
            import torch

            def train(loss, use_amp):
                if use_amp:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
                    torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)
                if use_amp:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
            """
        ),
        Valid(
            """
            import torch

            # Without a GradScaler there is nothing to unscale.
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            """
        ),
        Valid(
            """
            import torch

            def train(loss):
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                # clipping after the step no longer affects this update (different bug class)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            """
        ),
    )

    invalid = (
        Invalid(
            """
            import torch

            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = criterion(model(x), y)
                scaler.scale(loss).backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # TD302
                scaler.step(optimizer)
                scaler.update()
            """,
            fixed="""
            import torch

            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = criterion(model(x), y)
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # TD302
                scaler.step(optimizer)
                scaler.update()
            """,
        ),
        Invalid(
            """
            from torch.nn.utils import clip_grad_norm_ as clip

            class Trainer:
                def training_step(self, loss):
                    self.scaler.scale(loss).backward()
                    grad_norm = clip(self.model.parameters(), self.max_norm)  # TD302
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                    return grad_norm
            """,
            fixed="""
            from torch.nn.utils import clip_grad_norm_ as clip

            class Trainer:
                def training_step(self, loss):
                    self.scaler.scale(loss).backward()
                    self.scaler.unscale_(self.optimizer)
                    grad_norm = clip(self.model.parameters(), self.max_norm)  # TD302
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
                    return grad_norm
            """,
        ),
        Invalid(
            """
            import torch.nn.utils as nn_utils

            def train(loss, use_amp):
                if use_amp:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
                nn_utils.clip_grad_value_(model.parameters(), 0.5)  # TD302
                if use_amp:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
            """,
            fixed=None,  # the step happens in a branch: the right place for unscale_ is unclear
        ),
        Invalid(
            """
            import torch

            def train(loss):
                scaler.scale(loss).backward()
                for group in optimizer.param_groups:
                    torch.nn.utils.clip_grad_norm_(group["params"], 1.0)  # TD302
                scaler.step(optimizer)
                scaler.update()
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        from traindoctor.facts.amp.static import CLIP_FUNCTIONS, amp_facts, exclusive, pos

        facts = amp_facts(ctx)
        scaled = [b for b in facts.backwards if b.kind == "scaled"]
        if not scaled:
            return
        clips = [c for q in sorted(CLIP_FUNCTIONS) for c in ctx.calls_to(q)]
        if not clips:
            return
        clips.sort(key=pos)
        unscales = [c for c in ctx.method_calls("unscale_")]
        steps = [c for c in ctx.method_calls("step")]
        reported: set[int] = set()
        fixed_steps: set[int] = set()
        for clip in clips:
            scope = facts.scope(clip)
            before = [
                b for b in scaled if b.scope is scope and pos(b.call) < pos(clip) and not exclusive(ctx, b.call, clip)
            ]
            if not before:
                continue
            backward = before[-1]
            step = next(
                (
                    s
                    for s in steps
                    if facts.scope(s) is scope
                    and pos(s) > pos(clip)
                    and dotted(receiver(s)) == backward.scaler
                    and not exclusive(ctx, s, clip)
                ),
                None,
            )
            if step is None or id(clip) in reported:
                continue
            if any(
                facts.scope(u) is scope and pos(backward.call) < pos(u) < pos(clip) and not exclusive(ctx, u, clip)
                for u in unscales
            ):
                continue
            reported.add(id(clip))
            fix = None
            if id(step) not in fixed_steps:
                fix = self._fix(ctx, clip, step)
                fixed_steps.add(id(step))
            scaler_text = backward.scaler or "scaler"
            yield ctx.report(
                self,
                clip,
                f"Gradients are clipped while still scaled by `{scaler_text}`; call "
                f"`{scaler_text}.unscale_(optimizer)` before clipping.",
                fix=fix,
                help=f"Insert `{scaler_text}.unscale_(optimizer)` before the clip",
            )

    @staticmethod
    def _fix(ctx: FileContext, clip: ast.Call, step: ast.Call) -> Fix | None:
        scaler = dotted(receiver(step))
        if scaler is None or len(step.args) != 1 or step.keywords:
            return None
        optimizer = dotted(step.args[0])
        if optimizer is None:
            return None
        stmt = ctx.statement_of(clip)
        # unscale_ may run once per optimizer and step: never inside a loop the step is outside.
        step_stmt = ctx.statement_of(step)
        for loop in ctx.enclosing_loops(stmt):
            if not ctx.within(step_stmt, loop):
                return None
        # The step must run whenever the clip does: same block, no branch in between.
        if ctx.parent(stmt) is not ctx.parent(step_stmt):
            return None
        text = f"{scaler}.unscale_({optimizer})"
        return ctx.fix_insert_line_before(stmt, text, f"Insert `{text}` before the clip")


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class ClipBeforeUnscaleMonitor(Monitor):
    """Gradient clipping while an enabled GradScaler's scale is still in the gradients.

    Between an enabled ``scaler.scale()`` and ``scaler.update()``, a ``clip_grad_norm_`` /
    ``clip_grad_value_`` call with no ``scaler.unscale_(optimizer)`` before it clips scaled
    gradients: the threshold is compared with gradients multiplied by the loss scale (65536 at
    the start), so clipping is far too weak or (for value clipping) far too strong.
    """

    rule = ClipBeforeUnscale

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self.scaler: GradScaler | None = None
        self.scaled = False
        self.unscaled = False
        self.count = 0
        self.kind = ""
        self.site: Site | None = None
        self.step_seen: int | None = None

    def on_scaler_call(self, scaler: GradScaler, method: str, optimizer: Optimizer | None = None) -> None:
        if method == "scale":
            if scaler.is_enabled():
                self.scaler = scaler
                self.scaled = True
        elif method == "unscale_":
            self.unscaled = True
        elif method == "update":
            self.scaled = self.unscaled = False

    def on_clip_grad(
        self, kind: str, parameters: torch.Tensor | Iterable[torch.Tensor], site: Site | None = None
    ) -> None:
        if not self.scaled or self.unscaled:
            return
        self.count += 1
        if self.site is None:
            from traindoctor.runtime.live import user_site

            self.site = user_site()
            self.kind = kind
            self.step_seen = self.session.step

    def on_run_end(self) -> None:
        if not self.count:
            return
        from traindoctor.runtime.live import site_kwargs

        scale = None
        if self.scaler is not None:  # set with the first clip counted
            try:
                scale = float(self.scaler.get_scale())
            except Exception:
                pass
        fn = "clip_grad_norm_" if self.kind == "norm" else "clip_grad_value_"
        self.report(
            f"`{fn}` clipped gradients still multiplied by the GradScaler's loss scale "
            f"({self.count} time(s)); call `scaler.unscale_(optimizer)` before clipping.",
            evidence={"clip": fn, "clips_before_unscale": self.count, "loss_scale": scale},
            step=self.step_seen,
            **site_kwargs(self.site),
        )
