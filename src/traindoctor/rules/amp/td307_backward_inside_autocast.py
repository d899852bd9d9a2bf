"""TD307 backward-inside-autocast: ``.backward()`` runs inside the autocast region."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


class BackwardInsideAutocast(Rule):
    code = "TD307"
    name = "backward-inside-autocast"
    severity = Severity.INFO
    summary = "`.backward()` runs inside the autocast region; leave the `with autocast` block before calling backward."
    gpu_only = False
    static = True
    triggers = ("autocast",)
    runtime = False
    fixable = "never"

    what_it_does = """
        Finds `.backward()` calls (including `scaler.scale(loss).backward()`) lexically inside
        the body of a `with torch.autocast(...)` / `with torch.cuda.amp.autocast()` block (also
        through a context bound to a name). Autocasts disabled with `enabled=False` are ignored.
    """
    why_bad = """
        Autocast should wrap only the forward pass and the loss computation. The backward ops
        run in the same dtype their forward ops chose regardless of the region, so backward
        inside it gains nothing, and PyTorch's AMP documentation says backward passes under
        autocast are not recommended. It also keeps autocast's cast cache alive longer and
        makes later code in the block (metrics, optimizer steps, gradient clipping) run under
        autocast by accident.
    """
    example = """
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x), y)
            loss.backward()
        optimizer.step()
    """
    use_instead = """
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    """
    references = (
        "https://pytorch.org/docs/stable/amp.html#torch.autocast",
        "https://pytorch.org/docs/stable/notes/amp_examples.html#typical-mixed-precision-training",
    )

    valid = (
        Valid(
            """
            import torch

            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = criterion(model(x), y)
            loss.backward()
            """
        ),
        Valid(
            """
            import torch

            with torch.autocast("cuda", enabled=False):
                loss = criterion(model(x.float()), y)
                loss.backward()
            """
        ),
        Valid(
            """
            import torch

            with torch.autocast("cuda", dtype=torch.bfloat16):
                def closure():
                    loss = criterion(model(x), y)
                    loss.backward()   # runs later, when the optimizer calls it
                    return loss
            optimizer.step(closure)
            """
        ),
        Valid(
            """
            import contextlib

            with contextlib.nullcontext():
                loss = criterion(model(x), y)
                loss.backward()
            """
        ),
    )

    invalid = (
        Invalid(
            """
            import torch

            for x, y in loader:
                with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
                    loss = criterion(model(x), y)
                    loss.backward()  # TD307
                optimizer.step()
            """
        ),
        Invalid(
            """
            from torch.cuda.amp import autocast as ac

            def train_step(batch):
                with ac(True):
                    loss = model(**batch).loss
                    scaler.scale(loss).backward()  # TD307
                    scaler.step(optimizer)
                    scaler.update()
            """
        ),
        Invalid(
            """
            import torch
            from functools import partial

            amp_autocast = partial(torch.autocast, device_type="cpu", dtype=torch.bfloat16)
            for x, y in loader:
                with amp_autocast():
                    out = model(x)
                    (criterion(out, y) / accum_steps).backward()  # TD307
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        from traindoctor.facts.amp.static import amp_facts

        facts = amp_facts(ctx)
        if not facts.file_uses_autocast or not facts.backwards:
            return
        regions = [a for a in facts.with_autocasts() if a.enabled is not False]
        for backward in facts.backwards:
            if any(facts.inside(backward.call, r) for r in regions):
                yield ctx.report(
                    self,
                    backward.call,
                    "`backward()` is called inside the autocast region; move it after the "
                    "`with` block so that only the forward pass and loss run under autocast.",
                    help="Dedent `backward()` out of the autocast block",
                )
