"""TD404 detect-anomaly-on: autograd's anomaly detection left on while training."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.runtime.events import Monitor
from traindoctor.static.args import find_arg

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.step_timer import StepRecord
    from traindoctor.static.context import FileContext

SET_MODE = ("torch.autograd.set_detect_anomaly", "torch.autograd.anomaly_mode.set_detect_anomaly")
CONTEXT = ("torch.autograd.detect_anomaly", "torch.autograd.anomaly_mode.detect_anomaly")
#: Words of a condition or function name that make the call a debugging switch.
_DEBUG_WORDS = ("debug", "anomal", "detect", "check", "verbose", "test", "nan", "inf")


class DetectAnomalyOn(Rule):
    code = "TD404"
    name = "detect-anomaly-on"
    severity = Severity.WARNING
    summary = (
        "Autograd's anomaly detection is on while training: every backward is several times slower; "
        "switch it on only behind a debug flag."
    )
    static = True
    runtime = True
    triggers = ("anomaly",)
    fixable = "never"

    what_it_does = """
    Reports `torch.autograd.set_detect_anomaly(True)` and `torch.autograd.detect_anomaly()` (as a
    call or a `with` block) in a file that trains (runs backward), when the call is unconditional:
    not under an `if`, not given a flag (`set_detect_anomaly(args.debug)`), not inside a function
    whose name says debug or test. Test files are skipped.

    At run time the rule reads `torch.is_anomaly_enabled()` at sampled steady steps (from the third
    optimizer step on) and reports when it was on at every one of them, with the median step time.
    """
    why_bad = """
    In anomaly mode autograd records the Python stack of every operation of the forward pass and
    checks every backward function's output for NaN; the extra work and synchronisation make
    training steps several times slower (PyTorch's documentation: "this mode should be enabled only
    for debugging as the different tests will slow down your program execution"). It is a
    debugging tool that is easy to forget in a script.
    """
    example = """
    import torch

    torch.autograd.set_detect_anomaly(True)
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
    """
    use_instead = """
    import torch

    torch.autograd.set_detect_anomaly(args.debug)  # on only when debugging
    for x, y in loader:
        loss_fn(model(x), y).backward()
        optimizer.step()
    """
    references = (
        "https://pytorch.org/docs/stable/autograd.html#anomaly-detection",
        "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
    )

    valid = (
        Valid("""
        import torch

        if args.detect_anomaly:
            torch.autograd.set_detect_anomaly(True)
        torch.autograd.set_detect_anomaly(False)
        loss.backward()
        """),
        Valid("""
        import torch

        def debug_step(model, x):
            with torch.autograd.detect_anomaly():
                model(x).sum().backward()
        """),
        Valid("""
        import torch

        # no backward in this file: not training
        torch.autograd.set_detect_anomaly(True)
        print(model(x))
        """),
    )
    invalid = (
        Invalid("""
        import torch

        torch.autograd.set_detect_anomaly(True)  # TD404
        for x, y in loader:
            loss_fn(model(x), y).backward()
        """),
        Invalid("""
        from torch import autograd

        def train(model, loader, opt):
            for x, y in loader:
                with autograd.detect_anomaly():  # TD404
                    loss = model(x, y)
                    loss.backward()
                opt.step()
        """),
        Invalid("""
        import torch

        def main():
            torch.autograd.set_detect_anomaly(True, check_nan=True)  # TD404
            for batch in loader:
                model(batch).mean().backward()
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.batching.static import trains

        if not trains(ctx):
            return
        for call in ctx.calls_to(*SET_MODE):
            mode = find_arg(call, "mode", ("mode", "check_nan"))
            if isinstance(mode, ast.Constant) and mode.value is True and not _debug_only(ctx, call):
                yield self._report(ctx, call, "`torch.autograd.set_detect_anomaly(True)`")
        for call in ctx.calls_to(*CONTEXT):
            if not _debug_only(ctx, call):
                yield self._report(ctx, call, "`torch.autograd.detect_anomaly()`")

    def _report(self, ctx: FileContext, call: ast.Call, what: str) -> Finding:
        return ctx.report(
            self,
            call,
            f"{what} keeps anomaly detection on while training, which makes every backward several "
            "times slower: enable it only behind a debug flag.",
            help="Enable anomaly detection only when debugging",
        )


def _words(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in _DEBUG_WORDS)


def _debug_only(ctx: FileContext, call: ast.Call) -> bool:
    """Under an ``if`` (other than ``__name__ == "__main__"``), or in a debug/test function."""
    for node in ctx.ancestors(call):
        if isinstance(node, (ast.If, ast.IfExp)):
            test = ctx.segment(node.test)
            if "__name__" not in test:
                return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _words(node.name):
            return True
    return False


# ---------------------------------------------------------------- runtime half
def _sampled(index: int) -> bool:
    """Steady steps 3-8, then every 50th."""
    return 3 <= index <= 8 or (index > 8 and index % 50 == 0)


class DetectAnomalyOnMonitor(Monitor):
    """Anomaly mode read at sampled steady steps (``torch.is_anomaly_enabled()``, a flag read)."""

    rule = DetectAnomalyOn

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.sampled = 0
        self.on = 0
        self._enabled: Any = None

    def on_step_end(self, step_record: StepRecord) -> None:
        if not _sampled(step_record.index):
            return
        if self._enabled is None:
            import torch

            self._enabled = torch.is_anomaly_enabled
        self.sampled += 1
        if self._enabled():
            self.on += 1

    def on_run_end(self) -> None:
        if self.sampled < 2 or self.on < self.sampled:
            return
        steps = [r.end - r.start for r in self.session.records[2:] if r.end > r.start]
        median_ms = round(sorted(steps)[len(steps) // 2] * 1000, 3) if steps else None
        self.report(
            "Autograd's anomaly detection was on at every sampled training step, which makes every "
            "backward several times slower: enable it only behind a debug flag.",
            evidence={"anomaly_mode": True, "sampled_steps": self.sampled, "median_step_ms": median_ms},
            step=self.session.step,
        )
