"""TD502 checkpoint-without-scheduler: an LR scheduler exists but its state is not in the checkpoint."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    from torch.optim.lr_scheduler import LRScheduler

    from traindoctor.runtime.live import Site
    from traindoctor.static.context import FileContext


class CheckpointWithoutScheduler(Rule):
    code = "TD502"
    name = "checkpoint-without-scheduler"
    severity = Severity.ERROR
    summary = (
        "An LR scheduler is used but the training checkpoint does not save its state; save "
        "`scheduler.state_dict()` with it."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("save",)
    fixable = "never"

    what_it_does = """
Reports a training checkpoint (a `torch.save` that holds the optimizer state, or a weights-only
save inside the training loop when nothing else in the file saves the optimizer) when the file
builds an LR scheduler (`torch.optim.lr_scheduler.*`, transformers' `get_*_schedule*`, timm's
`create_scheduler`) and no save in the file holds that scheduler's state. The checkpoint may be a
dict built over several statements or passed through a local helper; a value the checker cannot
read under a key that could hold the scheduler silences the rule, and so does a resume that
sets the schedule's position by hand (`scheduler.last_epoch = start_epoch - 1`).
"""
    why_bad = """
An LR scheduler is stateful: it counts the steps or epochs already taken (`last_epoch`) and, for
schedules such as `OneCycleLR`, `CosineAnnealingWarmRestarts` or `ReduceLROnPlateau`, keeps more
state (cycle position, best metric, patience counter). A resumed run that rebuilds the scheduler
without loading its `state_dict()` starts the schedule from the beginning: warmup runs again at the
wrong point of training and the learning rate no longer matches the optimizer state, which changes
the result of the run. Restoring the optimizer's param-group `lr` alone does not fix this, because
the scheduler overwrites it at its next `step()`.
"""
    example = """
scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=steps)
...
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")
"""
    use_instead = """
torch.save(
    {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    },
    "ckpt.pt",
)

# or: traindoctor.checkpoint.save("ckpt.pt", model=model, optimizer=optimizer, scheduler=scheduler)
"""
    options = """
    No thresholds. At run time: a training checkpoint (model weights plus optimizer, scaler or
    RNG state, or integer entries such as `epoch`) without scheduler state while an LR scheduler
    drives an optimizer of the saved model. A bare weights export is TD501's finding.
    """
    references = (
        "https://pytorch.org/docs/stable/optim.html#how-to-adjust-learning-rate",
        "https://pytorch.org/docs/stable/generated/torch.optim.lr_scheduler.LRScheduler.html",
    )

    valid = (
        Valid(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[30, 60])
            for epoch in range(90):
                train(model, loader, optimizer)
                scheduler.step()
                torch.save(
                    {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "scheduler": scheduler.state_dict(), "epoch": epoch},
                    "checkpoint.pt",
                )
            """
        ),
        # State added to the dict later, through update().
        Valid(
            """
            import torch
            from transformers import get_linear_schedule_with_warmup

            optimizer = torch.optim.AdamW(model.parameters(), lr=5e-5)
            lr_scheduler = get_linear_schedule_with_warmup(optimizer, 500, 10000)
            for step, batch in enumerate(loader):
                model(**batch).loss.backward()
                optimizer.step()
                lr_scheduler.step()
                if step % 1000 == 0:
                    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                    state.update(lr_scheduler=lr_scheduler.state_dict(), step=step)
                    torch.save(state, f"step_{step}.pt")
            """
        ),
        # The schedule position is restored by hand from the saved epoch.
        Valid(
            """
            import torch
            from torch.optim import lr_scheduler

            optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.937)
            scheduler = lr_scheduler.LambdaLR(optimizer, lr_lambda=lf)
            if resume:
                ckpt = torch.load(weights, weights_only=True)
                optimizer.load_state_dict(ckpt["optimizer"])
                start_epoch = ckpt["epoch"] + 1
            scheduler.last_epoch = start_epoch - 1
            for epoch in range(start_epoch, epochs):
                train(model, loader, optimizer)
                scheduler.step()
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "epoch": epoch}, last)
            """
        ),
        # No scheduler in the file.
        Valid(
            """
            import torch

            optimizer = torch.optim.Adam(model.parameters())
            for epoch in range(10):
                train(model, loader, optimizer)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")
            """
        ),
        # A weights export after training, scheduler irrelevant.
        Valid(
            """
            import torch

            optimizer = torch.optim.Adam(model.parameters())
            scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=100)
            for epoch in range(100):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                scheduler.step()
            torch.save(model.state_dict(), "final.pt")
            """
        ),
    )
    invalid = (
        Invalid(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=10000)
            for epoch in range(10):
                train(model, loader, optimizer, scheduler)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")  # TD502
            """
        ),
        # Aliases, positional arguments, a dict built incrementally.
        Invalid(
            """
            import torch as th
            from torch.optim import lr_scheduler

            opt = th.optim.AdamW(model.parameters(), lr=1e-3)
            sched = lr_scheduler.CosineAnnealingLR(opt, 100)
            for epoch in range(100):
                for x, y in loader:
                    opt.zero_grad()
                    loss_fn(model(x), y).backward()
                    opt.step()
                sched.step()
                ckpt = {}
                ckpt["model"] = model.state_dict()
                ckpt["optim"] = opt.state_dict()
                th.save(ckpt, "last.pt")  # TD502
            """
        ),
        # transformers' schedule, checkpoint saved through a local helper.
        Invalid(
            """
            import torch
            from transformers import get_cosine_schedule_with_warmup

            def save(state, path):
                torch.save(state, path)

            optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
            scheduler = get_cosine_schedule_with_warmup(optimizer, 100, 5000)
            for step, batch in enumerate(loader):
                model(**batch).loss.backward()
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                if step % 500 == 0:
                    save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, "ckpt.pt")  # TD502
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.checkpoint.static.advice import left_out_by_helper, left_out_of_several, via_related
        from traindoctor.facts.checkpoint.static.index import checkpoint_index
        from traindoctor.static.vocab import SCHEDULER

        idx = checkpoint_index(ctx)
        reported: set[int] = set()  # one finding per save
        for site, message, help in left_out_of_several(
            idx.checkpoints, SCHEDULER, "LR schedulers", "the schedule of each"
        ):
            if id(site.report) in reported:
                continue
            reported.add(id(site.report))
            yield ctx.report(self, site.report, message, help=help, related=via_related(ctx, site))
        for site in idx.checkpoints.missing_beside_best(SCHEDULER):
            owner = idx.objects.first_name(SCHEDULER, "scheduler")
            if id(site.report) in reported:
                continue
            reported.add(id(site.report))
            yield ctx.report(
                self,
                site.report,
                f"This checkpoint does not save the LR scheduler's state (only the best-so-far or final save "
                f"holds it), so a run resumed from it restarts the schedule; save "
                f"`{owner}.state_dict()` with it.",
                help=f"Save `{owner}.state_dict()` in the checkpoint",
                related=via_related(ctx, site),
            )
        for site, message, help in left_out_by_helper(idx.checkpoints, SCHEDULER, "the schedule"):
            if id(site.report) in reported:
                continue
            reported.add(id(site.report))
            yield ctx.report(self, site.report, message, help=help, related=via_related(ctx, site))
        schedulers = idx.objects.exists(SCHEDULER)
        if not schedulers or idx.saves.may_hold_anywhere(SCHEDULER):
            return
        name = idx.objects.first_name(SCHEDULER, "scheduler")
        for site in idx.checkpoints.resume_checkpoints():
            if id(site.report) in reported:
                continue
            reported.add(id(site.report))
            yield ctx.report(
                self,
                site.report,
                f"This checkpoint does not save the LR scheduler's state, so a resumed run "
                f"restarts the schedule; save `{name}.state_dict()` with it.",
                help=f"Save `{name}.state_dict()` in the checkpoint",
                related=via_related(ctx, site),
            )


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class CheckpointWithoutSchedulerMonitor(Monitor):
    """A training checkpoint (model weights plus resume state) without the state of a live LR
    scheduler that drives an optimizer of the saved model. A bare weights export is TD501's."""

    rule = CheckpointWithoutScheduler

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        import weakref

        self.schedulers: weakref.WeakSet[LRScheduler] = weakref.WeakSet()
        self.sites: set[Site | None] = set()

    def on_scheduler_created(self, scheduler: LRScheduler, site: Site | None = None) -> None:
        try:
            self.schedulers.add(scheduler)
        except TypeError:  # pragma: no cover - not weak-referenceable
            pass

    def on_checkpoint_save(self, obj: object, path: str | None, site: Site | None = None) -> None:
        if path is None or site in self.sites:
            return
        from traindoctor.facts.checkpoint.runtime import contents_for, relevant_optimizers

        contents = contents_for(self.session, obj)
        if not contents.is_training_checkpoint or contents.has_scheduler:
            return
        optimizers = relevant_optimizers(self.session, contents)
        live = sorted(
            type(s).__name__
            for s in list(self.schedulers)
            if any(getattr(s, "optimizer", None) is o for o in optimizers)
        )
        if not live:
            live = [
                "LR scheduler (created before the watch)"
                for o in optimizers
                if getattr(getattr(o, "step", None), "_wrapped_by_lr_sched", False)
            ][:1]
        if not live:
            return
        from traindoctor.runtime.live import site_kwargs

        self.sites.add(site)
        self.report(
            f"This checkpoint does not hold the state of the {', '.join(live)}, so the learning-rate "
            "schedule restarts on resume; save `scheduler.state_dict()` too.",
            evidence={"path": path, "missing_schedulers": live},
            step=self.session.step,
            **site_kwargs(site),
        )
