"""TD405 compile-recompiles: ``torch.compile`` recompiles the same function again and again."""

from __future__ import annotations

import sys
from typing import Any

from traindoctor.finding import Severity
from traindoctor.rules.base import Rule
from traindoctor.runtime.events import Monitor


class CompileRecompiles(Rule):
    code = "TD405"
    name = "compile-recompiles"
    severity = Severity.WARNING
    summary = (
        "`torch.compile` recompiles the same function again and again (shape or guard churn): mark the "
        "changing dimension dynamic or keep the guarded values fixed."
    )
    static = False
    runtime = True
    fixable = "never"

    what_it_does = """
    At run time, reads dynamo's own records at the end of the watch: the guard failures per
    compiled function (each one is a recompilation, with its reason: `tensor 'x' size mismatch at
    index 0. expected 8, actual 12`) and the time dynamo spent compiling, counting only what
    happened during the watch. It reports a function recompiled at least `TD405.min_recompiles`
    times (default 4), or up to dynamo's recompile limit (after which it runs eagerly). Runs that
    never use `torch.compile` are not affected (dynamo is not even imported for them).
    """
    why_bad = """
    A compiled function carries guards on what it was specialised for: input shapes, dtypes,
    Python values, module attributes. When a guard fails, dynamo traces and compiles again, which
    costs seconds each time; after `torch._dynamo.config.recompile_limit` (8 by default) versions
    it gives up and runs the function eagerly for good, so the run pays the compilations and loses
    the speed-up. Typical causes: variable batch or sequence lengths with `dynamic=False`, a
    Python scalar (the step, a learning rate) passed into the compiled function, a module
    attribute that changes every step.
    """
    example = """
    model = torch.compile(model, dynamic=False)
    for x, y in loader:  # the last batch, or every batch, has another length
        loss_fn(model(x), y).backward()
    """
    use_instead = """
    model = torch.compile(model)  # automatic dynamic shapes after the first recompile
    for x, y in loader:
        torch._dynamo.mark_dynamic(x, 0)  # or pad to a few fixed lengths, drop_last=True
        loss_fn(model(x), y).backward()
    """
    options = """
    `TD405.min_recompiles` (default 4): recompilations of one function during the watch that are
    reported. Evidence: recompiles per function (the worst one named), up to three distinct
    reasons, graphs compiled and seconds spent compiling during the watch.
    """
    references = (
        "https://pytorch.org/docs/stable/torch.compiler_troubleshooting.html",
        "https://pytorch.org/docs/stable/torch.compiler_dynamic_shapes.html",
    )


def _dynamo() -> Any:
    """``torch._dynamo.utils`` if this process imported it (never imported here)."""
    return sys.modules.get("torch._dynamo.utils")


def _entries(reasons: Any) -> set[str]:
    """The compiled versions that failed a guard: each reason starts with the version's id
    (``"0/3: tensor 'x' size mismatch ..."``), and every recompilation adds one version that
    the later lookups try (and fail) again, so the distinct ids count the recompilations."""
    out = set()
    for reason in reasons:
        head, sep, _rest = str(reason).partition(": ")
        out.add(head if sep and "/" in head else str(reason))
    return out


def _failures(utils: Any) -> dict[int, set[str]]:
    return {id(code): _entries(reasons) for code, reasons in dict(getattr(utils, "guard_failures", {}) or {}).items()}


def _compile_seconds(utils: Any) -> float:
    metrics = getattr(utils, "compilation_time_metrics", {}) or {}
    return float(sum(metrics.get("_compile.compile_inner", ()) or ()))


class CompileRecompilesMonitor(Monitor):
    """Guard failures and compile time of dynamo, counted from the watch's start."""

    rule = CompileRecompiles

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self._before: dict[int, set[str]] = {}
        self._graphs = 0
        self._seconds = 0.0

    def on_run_start(self) -> None:
        utils = _dynamo()
        if utils is not None:
            self._before = _failures(utils)
            self._graphs = int(utils.counters["stats"].get("unique_graphs", 0))
            self._seconds = _compile_seconds(utils)

    def on_run_end(self) -> None:
        utils = _dynamo()
        if utils is None:
            return
        minimum = int(self.threshold("min_recompiles", 4))
        worst: tuple[int, str, Any] | None = None
        for code, reasons in dict(getattr(utils, "guard_failures", {}) or {}).items():
            new = len(_entries(reasons) - self._before.get(id(code), set()))
            if new >= minimum and (worst is None or new > worst[0]):
                worst = (new, getattr(code, "co_name", str(code)), reasons)
        if worst is None:
            return
        count, name, reasons = worst
        distinct: list[str] = []
        for reason in reasons:
            text = str(reason).split(": ", 1)[-1][:160]
            if text not in distinct:
                distinct.append(text)
        graphs = int(utils.counters["stats"].get("unique_graphs", 0)) - self._graphs
        seconds = round(_compile_seconds(utils) - self._seconds, 3)
        self.report(
            f"`torch.compile` recompiled `{name}` {count} times during the run ({distinct[0]}): mark the "
            "changing dimension dynamic or keep the guarded values fixed.",
            evidence={
                "function": name,
                "recompiles": count,
                "reasons": distinct[:3],
                "graphs_compiled": graphs,
                "compile_seconds": seconds,
            },
            step=self.session.step,
        )
