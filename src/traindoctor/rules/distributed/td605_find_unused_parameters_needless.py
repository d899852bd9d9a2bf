"""TD605 find-unused-parameters-needless: DDP searches for unused parameters that do not exist."""

from __future__ import annotations

import ast
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.runtime.events import Monitor
from traindoctor.static.args import find_arg

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

DDP = ("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel")


class FindUnusedParametersNeedless(Rule):
    code = "TD605"
    name = "find-unused-parameters-needless"
    severity = Severity.WARNING
    summary = (
        "`DistributedDataParallel(find_unused_parameters=True)` while every parameter gets a gradient: "
        "each iteration pays an extra traversal of the autograd graph for nothing."
    )
    static = True
    runtime = True
    triggers = ("find_unused_parameters",)
    fixable = "never"

    what_it_does = """
    Statically, reports `DistributedDataParallel(..., find_unused_parameters=True)`: the checker
    cannot know whether some parameters really go unused, so the finding only asks to check
    (`traindoctor run` measures it). Test files are skipped.

    At run time the rule reads, on sampled optimizer steps from the second on, the
    gradients of the DDP model's trainable parameters: it reports when every one of them had a
    nonzero gradient on every sampled step, i.e. the search never found an unused parameter.
    """
    why_bad = """
    With `find_unused_parameters=True`, DDP traverses the autograd graph from the outputs after
    every forward to find the parameters that will not get a gradient, so it can mark them ready
    for the all-reduce. When every parameter is used, the traversal is pure overhead on every
    iteration (PyTorch's DDP documentation and tuning guide: set it only when needed), and it
    also keeps DDP from overlapping some communication with the backward pass.
    """
    example = """
    model = DistributedDataParallel(model, device_ids=[rank], find_unused_parameters=True)
    """
    use_instead = """
    model = DistributedDataParallel(model, device_ids=[rank])
    """
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html",
        "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
    )

    valid = (
        Valid("""
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(net, device_ids=[rank])
        other = DDP(net2, find_unused_parameters=args.find_unused)
        """),
        Valid("""
        import torch

        model = torch.nn.parallel.DistributedDataParallel(net, find_unused_parameters=False)
        """),
        Valid("""
        # not torch's DDP
        model = MyWrapper(net, find_unused_parameters=True)
        """),
    )
    invalid = (
        Invalid("""
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(net, device_ids=[rank], find_unused_parameters=True)  # TD605
        """),
        Invalid("""
        import torch

        model = torch.nn.parallel.DistributedDataParallel(
            net,
            device_ids=[local_rank],
            find_unused_parameters=True,  # TD605
        )
        """),
        Invalid("""
        from torch.nn.parallel import DistributedDataParallel

        def wrap(m, rank):
            return DistributedDataParallel(m, [rank], find_unused_parameters=True)  # TD605
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import is_test_file

        if is_test_file(ctx.filename):
            return
        for call in ctx.calls_to(*DDP):
            flag = find_arg(call, "find_unused_parameters")
            if isinstance(flag, ast.Constant) and flag.value is True:
                yield ctx.report(
                    self,
                    flag,
                    "`find_unused_parameters=True` makes DDP traverse the autograd graph every "
                    "iteration; unless some parameters really get no gradient, drop it "
                    "(`traindoctor run` measures whether they do).",
                    help="Drop `find_unused_parameters=True` if every parameter is used",
                )


# ---------------------------------------------------------------- runtime half
def _sampled(step: int) -> bool:
    return 2 <= step <= 7 or step % 50 == 0


class FindUnusedParametersNeedlessMonitor(Monitor):
    """Every trainable parameter of a ``find_unused_parameters=True`` DDP model had a nonzero
    gradient on every sampled step."""

    rule = FindUnusedParametersNeedless

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self._ddp: list[Any] = []
        self.sampled = 0
        self.all_used = 0
        self.parameters = 0

    def on_model_found(self, module: Any) -> None:
        if type(module).__name__ == "DistributedDataParallel" and getattr(module, "find_unused_parameters", False):
            self._ddp.append(weakref.ref(module))

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        if not self._ddp or not _sampled(self.session.step + 1):
            return
        import torch

        for ref in self._ddp:
            ddp = ref()
            if ddp is None:
                continue
            params = [p for p in ddp.module.parameters() if p.requires_grad]
            if not params:
                continue
            self.sampled += 1
            self.parameters = len(params)
            if any(p.grad is None for p in params):
                continue
            norms = torch._foreach_norm([p.grad for p in params])
            if bool((torch.stack([n.float() for n in norms]) > 0).all()):
                self.all_used += 1

    def on_run_end(self) -> None:
        if self.sampled < 2 or self.all_used < self.sampled:
            return
        self.report(
            f"`find_unused_parameters=True`, but all {self.parameters} trainable parameters had a "
            f"gradient on every sampled step: drop the flag to save a graph traversal per iteration.",
            evidence={
                "parameters": self.parameters,
                "sampled_steps": self.sampled,
                "steps_all_used": self.all_used,
                "world_size": self.session.world_size,
            },
            step=self.session.step,
        )
