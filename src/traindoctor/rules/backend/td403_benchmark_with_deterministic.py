"""TD403 benchmark-with-deterministic: cuDNN autotuning switched on in a run that wants reproducibility."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.args import UNKNOWN

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.live import Site
    from traindoctor.runtime.step_timer import StepRecord
    from traindoctor.static.context import FileContext

BENCHMARK = "torch.backends.cudnn.benchmark"
DETERMINISTIC = "torch.backends.cudnn.deterministic"
USE_DETERMINISTIC = "torch.use_deterministic_algorithms"
CUDNN_FLAGS = "torch.backends.cudnn.flags"


@dataclass(frozen=True)
class Setting:
    """One place that sets a flag: the flag, the value (True/False/UNKNOWN) and the node."""

    flag: str
    value: object
    #: The assignment, or the call that sets the flag.
    node: ast.stmt | ast.expr


def cudnn_settings(ctx: FileContext) -> list[Setting]:
    """Every assignment of ``cudnn.benchmark``/``cudnn.deterministic`` and every call that sets
    them (``torch.use_deterministic_algorithms``, ``torch.backends.cudnn.flags``), in source order.

    Aliases resolve: ``from torch.backends import cudnn``, ``import torch.backends.cudnn as cudnn``.
    ``use_deterministic_algorithms(True)`` counts as deterministic: it restricts cuDNN to
    deterministic algorithms exactly like ``cudnn.deterministic = True`` does.
    """
    out: list[Setting] = []
    for node in ctx.of(ast.Assign, ast.AnnAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            qn = ctx.qualname(target) if isinstance(target, ast.Attribute) else None
            if qn in (BENCHMARK, DETERMINISTIC) and node.value is not None:
                out.append(Setting(qn, _truth(ctx.value(node.value)), node))
    for call in ctx.calls_to(USE_DETERMINISTIC):
        arg = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "mode"), None)
        if arg is not None:
            out.append(Setting(DETERMINISTIC, _truth(ctx.value(arg)), call))
    for call in ctx.calls_to(CUDNN_FLAGS):
        for kw in call.keywords:
            if kw.arg in ("benchmark", "deterministic"):
                out.append(Setting(f"torch.backends.cudnn.{kw.arg}", _truth(ctx.value(kw.value)), call))
    out.sort(key=lambda s: (s.node.lineno, s.node.col_offset))
    return out


def _truth(value: object) -> object:
    if value is UNKNOWN:
        return UNKNOWN
    return bool(value)


def standing_true(ctx: FileContext, settings: list[Setting], flag: str) -> list[Setting]:
    """``flag = True`` settings that no later ``flag = False`` (in source order) undoes."""
    from traindoctor.facts.data.static import exclusive_branches

    out = []
    for i, s in enumerate(settings):
        if s.flag != flag or s.value is not True:
            continue
        undone = any(
            later.flag == flag and later.value is not True and not exclusive_branches(ctx, s.node, later.node)
            for later in settings[i + 1 :]
        )
        if not undone:
            out.append(s)
    return out


class BenchmarkWithDeterministic(Rule):
    code = "TD403"
    name = "benchmark-with-deterministic"
    severity = Severity.WARNING
    summary = (
        "`cudnn.benchmark` and deterministic mode are both switched on; for reproducible runs set "
        "`torch.backends.cudnn.benchmark = False`."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("cudnn", "deterministic")
    fixable = "never"

    what_it_does = """
    Reports a file that sets `torch.backends.cudnn.benchmark = True` and also asks for
    deterministic results, with `torch.backends.cudnn.deterministic = True` or
    `torch.use_deterministic_algorithms(True)`, in code paths that can both run (assignments in the
    two branches of one `if`/`else` are not reported, and a later `= False` undoes an earlier
    `True`). The finding is placed at the later of the two settings. Aliases such as
    `from torch.backends import cudnn` are resolved.

    Lightning's `Trainer(benchmark=True, deterministic=True)` is the same conflict (Lightning
    sets both flags as asked and only warns); it is reported at the later of the two keywords.
    """
    why_bad = """
    The two settings pull in opposite directions. `cudnn.benchmark = True` makes cuDNN time several
    convolution algorithms for each new input shape and keep the fastest; which one wins depends
    on timing noise, so it can differ from one run to the next. `cudnn.deterministic = True` (and
    `torch.use_deterministic_algorithms(True)`, which sets the same restriction for cuDNN) limits
    the choice to deterministic algorithms, but benchmarking still picks among them by timing, and
    different algorithms round differently. PyTorch's reproducibility notes therefore ask for
    `benchmark = False` together with deterministic mode. Either the run wants reproducibility
    (turn benchmarking off) or speed (drop the deterministic setting).
    """
    example = """
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = True
    """
    use_instead = """
    # reproducible run
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False

    # or: fast run
    torch.backends.cudnn.benchmark = True
    """
    options = """
    No thresholds. At run time: both flags are True when an optimizer step ends. Flags changed
    through the `torch.backends.cudnn.flags(...)` context manager are not seen.
    """
    references = (
        "https://pytorch.org/docs/stable/notes/randomness.html#cuda-convolution-benchmarking",
        "https://pytorch.org/docs/stable/generated/torch.use_deterministic_algorithms.html",
        "https://pytorch.org/docs/stable/backends.html#torch.backends.cudnn.benchmark",
    )

    valid = (
        Valid(
            """
            import torch

            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False
            """
        ),
        # Exclusive branches.
        Valid(
            """
            from torch.backends import cudnn

            if args.deterministic:
                cudnn.deterministic = True
                cudnn.benchmark = False
            else:
                cudnn.benchmark = True
            """
        ),
        # A later False undoes the earlier True; and an unknown value.
        Valid(
            """
            import torch
            import torch.backends.cudnn as cudnn

            cudnn.benchmark = True
            if args.seed is not None:
                torch.manual_seed(args.seed)
                cudnn.benchmark = False
                torch.use_deterministic_algorithms(True)
            cudnn.deterministic = args.deterministic
            """
        ),
        Valid(
            """
            import torch

            torch.backends.cudnn.benchmark = True
            torch.use_deterministic_algorithms(False)
            """
        ),
        Valid(
            """
            import lightning as L

            # Lightning turns benchmark off itself when deterministic=True
            trainer = L.Trainer(max_epochs=10, deterministic=True)
            """
        ),
    )
    invalid = (
        Invalid(
            """
            import torch

            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = True  # TD403
            """
        ),
        # The ImageNet-example shape: seeding sets deterministic, main_worker turns benchmark on.
        Invalid(
            """
            import torch
            import torch.backends.cudnn as cudnn

            def main(args):
                if args.seed is not None:
                    torch.manual_seed(args.seed)
                    cudnn.deterministic = True

            def main_worker(args):
                cudnn.benchmark = True  # TD403
            """
        ),
        # use_deterministic_algorithms counts as deterministic; reported at the later call.
        Invalid(
            """
            from torch.backends import cudnn
            import torch

            BENCH = True
            cudnn.benchmark = BENCH
            torch.use_deterministic_algorithms(mode=True)  # TD403
            """
        ),
        Invalid(
            """
            import torch

            with torch.backends.cudnn.flags(enabled=True, benchmark=True, deterministic=True):  # TD403
                run()
            """
        ),
        Invalid(
            """
            import lightning as L

            trainer = L.Trainer(
                max_epochs=10,
                benchmark=True,
                deterministic=True,  # TD403
            )
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import exclusive_branches

        yield from self._check_lightning(ctx)
        if not any(n.startswith("torch") for n in ctx.imports.names.values()):
            return
        settings = cudnn_settings(ctx)
        benchmarks = standing_true(ctx, settings, BENCHMARK)
        deterministics = standing_true(ctx, settings, DETERMINISTIC)
        for bench in benchmarks:
            partners = [d for d in deterministics if not exclusive_branches(ctx, bench.node, d.node)]
            if not partners:
                continue
            det = partners[0]
            later = max(bench, det, key=lambda s: (s.node.lineno, s.node.col_offset))
            spelled = (
                "`torch.use_deterministic_algorithms(True)`"
                if isinstance(det.node, ast.Call) and ctx.qualname(det.node.func) == USE_DETERMINISTIC
                else "`cudnn.deterministic = True`"
            )
            yield ctx.report(
                self,
                later.node,
                f"`cudnn.benchmark = True` (line {bench.node.lineno}) picks convolution algorithms "
                f"by timing, which defeats {spelled} (line {det.node.lineno}); set "
                "`torch.backends.cudnn.benchmark = False` for reproducible runs.",
                help="Set `torch.backends.cudnn.benchmark = False`",
            )
            return

    def _check_lightning(self, ctx: FileContext) -> Iterable[Finding]:
        """``Trainer(benchmark=True, deterministic=True)``: Lightning sets both flags as asked."""
        from traindoctor.facts.frameworks.static import lightning_trainers

        for call in lightning_trainers(ctx):
            bench = ctx.arg(call, "benchmark", qualname="")
            det = ctx.arg(call, "deterministic", qualname="")
            if not (isinstance(bench, ast.expr) and isinstance(det, ast.expr)):
                continue
            if ctx.value(bench) is not True or ctx.value(det) not in (True, "warn"):
                continue
            later = max(bench, det, key=lambda n: (n.lineno, n.col_offset))
            yield ctx.report(
                self,
                later,
                "`Trainer(benchmark=True)` picks convolution algorithms by timing, which defeats "
                "`deterministic=True`; pass `benchmark=False` (or leave it unset) for reproducible runs.",
                help="Pass `benchmark=False`",
            )


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class BenchmarkWithDeterministicMonitor(Monitor):
    """``cudnn.benchmark`` and ``cudnn.deterministic`` both True while training steps run.
    Reported at the later of the two assignments (when made during the watch)."""

    rule = BenchmarkWithDeterministic

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self.flags: dict[str, bool] = {}
        self.last_site: dict[str, Site] = {}
        self.order: list[str] = []
        self.done = False

    def on_backend_flags(self, flags: Mapping[str, bool], site: Site | None = None) -> None:
        new = dict(flags)
        for name, value in new.items():
            if site is not None and self.flags.get(name) != value:
                self.last_site[name] = site
                if name in self.order:
                    self.order.remove(name)
                self.order.append(name)
        self.flags = new

    def on_step_end(self, step_record: StepRecord) -> None:
        if self.done or not (self.flags.get("benchmark") and self.flags.get("deterministic")):
            return
        self.done = True
        from traindoctor.runtime.live import site_kwargs

        later = next((n for n in reversed(self.order) if n in ("benchmark", "deterministic")), None)
        self.report(
            "`cudnn.benchmark` and `cudnn.deterministic` are both True: benchmarking picks "
            "algorithms by timing, which defeats reproducibility; for reproducible runs set "
            "`cudnn.benchmark = False`.",
            evidence={"benchmark": True, "deterministic": True},
            step=self.session.step,
            **site_kwargs(self.last_site.get(later) if later else None),
        )
