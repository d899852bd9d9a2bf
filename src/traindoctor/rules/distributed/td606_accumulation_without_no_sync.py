"""TD606 accumulation-without-no-sync: DDP gradient accumulation that all-reduces on every micro-batch."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.runtime.events import Monitor

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

DDP = ("torch.nn.parallel.DistributedDataParallel", "torch.nn.parallel.distributed.DistributedDataParallel")
#: Spellings of skipping the gradient sync; a file with any of them is left alone.
SYNC_CONTROL = ("no_sync", "require_backward_grad_sync", "accumulate(", "set_requires_gradient_sync")


class AccumulationWithoutNoSync(Rule):
    code = "TD606"
    name = "accumulation-without-no-sync"
    severity = Severity.WARNING
    summary = (
        "Gradient accumulation under DDP without `model.no_sync()` on the micro-steps: gradients are "
        "all-reduced on every backward instead of once per optimizer step."
    )
    static = True
    runtime = True
    triggers = ("DistributedDataParallel",)
    fixable = "never"

    what_it_does = """
    Reports `loss.backward()` that runs on every iteration of a loop whose optimizer step is
    under an accumulation condition (`if (i + 1) % k == 0: optimizer.step()`), in a file that
    wraps its model in `DistributedDataParallel` and never skips the gradient sync (no
    `no_sync()`, `require_backward_grad_sync`, accelerate's `accumulate()`). Test files are
    skipped. The condition must be on the backward's path: a backward in the other arm of an
    `if` (the branch taken without accumulation) or followed by an unconditional optimizer step
    accumulates nothing. One finding per accumulation step: its AMP and plain backwards are one
    mistake, fixed by one `no_sync()`.

    At run time the rule counts, per optimizer step, the forwards of the DDP model run with
    autograd on and gradient sync enabled (each one makes the following backward all-reduce every
    gradient bucket) against the backward calls: it reports when they are equal and more than one
    on every sampled step.
    """
    why_bad = """
    DDP all-reduces the gradients during every backward of a forward run outside `no_sync()`.
    With `k` micro-batches per optimizer step only the last all-reduce is needed (gradients
    accumulate locally in between), so `k - 1` of every `k` all-reduces move the model's whole
    gradient over the network for nothing; with large models and slow interconnects this
    dominates the step time. The result is the same either way; only the time differs.
    """
    example = """
    model = DistributedDataParallel(model, device_ids=[rank])
    for i, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step()
            optimizer.zero_grad()
    """
    use_instead = """
    import contextlib

    model = DistributedDataParallel(model, device_ids=[rank])
    for i, (x, y) in enumerate(loader):
        stepping = (i + 1) % accum == 0
        with contextlib.nullcontext() if stepping else model.no_sync():
            loss = criterion(model(x), y) / accum
            loss.backward()
        if stepping:
            optimizer.step()
            optimizer.zero_grad()
    """
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html#torch.nn.parallel.DistributedDataParallel.no_sync",
        "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#skip-unnecessary-all-reduce-if-training-with-distributeddataparallel-and-gradient-accumulation",
    )

    valid = (
        Valid("""
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(net)
        for i, (x, y) in enumerate(loader):
            if (i + 1) % accum != 0:
                with model.no_sync():
                    (criterion(model(x), y) / accum).backward()
            else:
                (criterion(model(x), y) / accum).backward()
                optimizer.step()
        """),
        Valid("""
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(net)
        for i, (x, y) in enumerate(loader):
            model.require_backward_grad_sync = (i + 1) % accum == 0
            (criterion(model(x), y) / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
        """),
        Valid("""
        # no DDP: nothing is all-reduced
        for i, (x, y) in enumerate(loader):
            (criterion(model(x), y) / accum).backward()
            if (i + 1) % accum == 0:
                optimizer.step()
        """),
    )
    invalid = (
        Invalid("""
        import torch

        model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[rank])
        for i, (x, y) in enumerate(loader):
            loss = criterion(model(x), y) / accum
            loss.backward()  # TD606
            if (i + 1) % accum == 0:
                optimizer.step()
                optimizer.zero_grad()
        """),
        Invalid("""
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(net)
        for it, batch in enumerate(loader):
            scaler.scale(model(batch).mean() / 4).backward()  # TD606
            if (it + 1) % 4 == 0:
                scaler.step(opt)
                scaler.update()
        """),
        Invalid("""
        import torch.nn.parallel as par

        model = par.DistributedDataParallel(net)
        for i, (x, y) in enumerate(loader):
            (loss_fn(model(x), y) / k).backward()  # TD606
            if i % k == 0:
                optim.step()
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import is_test_file

        if is_test_file(ctx.filename) or not ctx.calls_to(*DDP) or any(w in ctx.source for w in SYNC_CONTROL):
            return
        reported: set[int] = set()
        for backward, step, divisor in _accumulating_backwards(ctx):
            if id(step) in reported:
                continue  # one finding per accumulation step (an AMP and a plain backward of it)
            reported.add(id(step))
            k = ast.unparse(divisor)
            yield ctx.report(
                self,
                backward,
                f"Under DDP this backward all-reduces the gradients on every micro-batch while the "
                f"optimizer steps every `{k}`: run the other micro-batches' forward and backward "
                "inside `model.no_sync()`.",
                help="Skip the gradient sync with `no_sync()` on the micro-steps",
            )


def _accumulating_backwards(ctx: FileContext) -> Iterator[tuple[ast.Call, ast.If, ast.expr]]:
    from traindoctor.facts.training.static import accumulation_step, enclosing_loops

    for call in sorted(ctx.method_calls("backward"), key=lambda c: (c.lineno, c.col_offset)):
        if call.args:
            continue  # ``accelerator.backward(loss)``, DeepSpeed: their own sync handling
        loops = enclosing_loops(ctx, call)
        step = accumulation_step(ctx, loops[0], call) if loops else None
        if step is not None:
            yield call, step[0], step[1]


# ---------------------------------------------------------------- runtime half
def _sampled(step: int) -> bool:
    """Steps 2-7 (the first may start before the hook is in place), then every 50th."""
    return 2 <= step <= 7 or step % 50 == 0


class AccumulationWithoutNoSyncMonitor(Monitor):
    """Synced DDP forwards per optimizer step against backward calls (a forward pre-hook on the
    DDP root only, removed at the end)."""

    rule = AccumulationWithoutNoSync

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self._handles: list[Any] = []
        self._synced = 0
        self._grad_enabled: Any = None
        self.sampled = 0
        self.every_backward = 0
        self.accumulation = 0

    def on_model_found(self, module: Any) -> None:
        if type(module).__name__ not in ("DistributedDataParallel",) or not hasattr(
            module, "require_backward_grad_sync"
        ):
            return
        import torch

        self._grad_enabled = torch.is_grad_enabled
        self._handles.append(module.register_forward_pre_hook(self._pre_forward))

    def _pre_forward(self, module: Any, args: Any) -> None:
        if module.require_backward_grad_sync and self._grad_enabled():
            self._synced += 1

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        synced, self._synced = self._synced, 0
        if not self._handles or not _sampled(self.session.step + 1):
            return
        calls = self.session.backward_calls_this_step
        if calls < 2:
            return
        self.sampled += 1
        if synced >= calls:
            self.every_backward += 1
            self.accumulation = max(self.accumulation, calls)

    def on_run_end(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self.sampled < 2 or self.every_backward < self.sampled:
            return
        k = self.accumulation
        self.report(
            f"DDP all-reduced the gradients on all {k} backward calls of every sampled optimizer "
            f"step: run the first {k - 1} micro-batches inside `model.no_sync()`.",
            evidence={
                "backward_per_step": k,
                "allreduce_rounds_per_step": k,
                "sampled_steps": self.sampled,
                "world_size": self.session.world_size,
            },
            step=self.session.step,
        )
