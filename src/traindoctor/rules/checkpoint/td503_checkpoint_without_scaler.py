"""TD503 checkpoint-without-scaler: a GradScaler exists but its state is not in the checkpoint."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    from torch.amp import GradScaler
    from torch.optim import Optimizer

    from traindoctor.runtime.live import Site
    from traindoctor.static.context import FileContext


class CheckpointWithoutScaler(Rule):
    code = "TD503"
    name = "checkpoint-without-scaler"
    severity = Severity.ERROR
    summary = (
        "A GradScaler is used but the training checkpoint does not save its state; save `scaler.state_dict()` with it."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("save",)
    fixable = "never"

    what_it_does = """
Reports a training checkpoint (a `torch.save` that holds the optimizer state, or a weights-only
save inside the training loop when nothing else in the file saves the optimizer) when the file
builds a gradient scaler (`torch.amp.GradScaler`, `torch.cuda.amp.GradScaler`, FSDP's
`ShardedGradScaler`, timm's `NativeScaler`) and no save in the file holds its state. A scaler built
with a literal `enabled=False` is ignored, and so are saves in test files (round-trip fixtures,
not checkpoints a run resumes from).
"""
    why_bad = """
`GradScaler` keeps the current loss scale and its growth tracker (how many steps have passed since
the last overflow). A resumed run that does not restore them restarts from `init_scale` (65536 by
default): the first iterations after every resume overflow and are skipped while the scale backs
off again, and a scale that had settled far below the default is lost. With a fixed step budget
those skipped steps are simply missing from training.
"""
    example = """
scaler = torch.amp.GradScaler("cuda")
...
torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")
"""
    use_instead = """
torch.save(
    {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict(),
    },
    "ckpt.pt",
)

# or: traindoctor.checkpoint.save("ckpt.pt", model=model, optimizer=optimizer, scaler=scaler)
"""
    options = """
    No thresholds. At run time: a training checkpoint without GradScaler state while an enabled
    GradScaler scaled losses in the run.
    """
    references = (
        "https://pytorch.org/docs/stable/notes/amp_examples.html#saving-resuming",
        "https://pytorch.org/docs/stable/amp.html#gradient-scaling",
    )

    valid = (
        Valid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda")
            optimizer = torch.optim.AdamW(model.parameters())
            for epoch in range(10):
                for x, y in loader:
                    with torch.autocast("cuda", dtype=torch.float16):
                        loss = loss_fn(model(x), y)
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "scaler": scaler.state_dict()}, "ckpt.pt")
            """
        ),
        # A scaler built disabled keeps no state.
        Valid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda", enabled=False)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                train(model, loader, optimizer, scaler)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")
            """
        ),
        # The scaler's state added under a key chosen at run time: may be there, stay silent.
        Valid(
            """
            import torch

            scaler = torch.cuda.amp.GradScaler()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                train(model, loader, optimizer, scaler)
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                state[scaler_key] = scaler.state_dict()
                torch.save(state, "ckpt.pt")
            """
        ),
        # The scaler passed (as an object) to an unknown checkpoint helper.
        Valid(
            """
            import torch
            from utils import save_checkpoint

            scaler = torch.amp.GradScaler()
            optimizer = torch.optim.AdamW(model.parameters())
            for epoch in range(10):
                train(model, loader, optimizer, scaler)
                save_checkpoint(model, optimizer, scaler, epoch)
                torch.save(model.state_dict(), "best.pt")
            """
        ),
    )
    invalid = (
        Invalid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda")
            optimizer = torch.optim.AdamW(model.parameters())
            for epoch in range(10):
                for x, y in loader:
                    with torch.autocast("cuda", dtype=torch.float16):
                        loss = loss_fn(model(x), y)
                    scaler.scale(loss).backward()
                    scaler.step(optimizer)
                    scaler.update()
                    optimizer.zero_grad()
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")  # TD503
            """
        ),
        # Aliased import of the deprecated scaler, keyword arguments, dict(...) call.
        Invalid(
            """
            import torch
            from torch.cuda.amp import GradScaler as Scaler

            grad_scaler = Scaler()
            opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
            for epoch in range(30):
                for x, y in loader:
                    opt.zero_grad()
                    grad_scaler.scale(criterion(net(x), y)).backward()
                    grad_scaler.step(opt)
                    grad_scaler.update()
                checkpoint = dict(net=net.state_dict(), opt=opt.state_dict(), epoch=epoch)
                torch.save(f="last.pth", obj=checkpoint)  # TD503
            """
        ),
        # A method of a trainer class that saves a full checkpoint.
        Invalid(
            """
            import torch

            class Trainer:
                def __init__(self, model):
                    self.model = model
                    self.optimizer = torch.optim.AdamW(model.parameters())
                    self.scaler = torch.amp.GradScaler()

                def save(self, path):
                    state = {
                        "model": self.model.state_dict(),
                        "optimizer": self.optimizer.state_dict(),
                    }
                    torch.save(state, path)  # TD503
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.checkpoint.static.advice import left_out_by_helper, left_out_of_several, via_related
        from traindoctor.facts.checkpoint.static.index import checkpoint_index
        from traindoctor.static.vocab import SCALER

        idx = checkpoint_index(ctx)
        reported: set[int] = set()  # one finding per save
        for site, message, help in left_out_of_several(
            idx.checkpoints, SCALER, "GradScalers", "the loss scale of each"
        ):
            if id(site.report) in reported:
                continue
            reported.add(id(site.report))
            yield ctx.report(self, site.report, message, help=help, related=via_related(ctx, site))
        for site in idx.checkpoints.missing_beside_best(SCALER):
            owner = idx.objects.first_name(SCALER, "scaler")
            if id(site.report) in reported:
                continue
            reported.add(id(site.report))
            yield ctx.report(
                self,
                site.report,
                f"This checkpoint does not save the GradScaler's state (only the best-so-far or final save "
                f"holds it), so a run resumed from it restarts the loss scale at its initial value; save "
                f"`{owner}.state_dict()` with it.",
                help=f"Save `{owner}.state_dict()` in the checkpoint",
                related=via_related(ctx, site),
            )
        for site, message, help in left_out_by_helper(idx.checkpoints, SCALER, "the loss scale at its initial value"):
            if id(site.report) in reported:
                continue
            reported.add(id(site.report))
            yield ctx.report(self, site.report, message, help=help, related=via_related(ctx, site))
        if not idx.objects.exists(SCALER) or idx.resume.kept_on_resume(SCALER):
            return
        name = idx.objects.first_name(SCALER, "scaler")
        for site in idx.checkpoints.resume_checkpoints():
            if id(site.report) in reported:
                continue
            reported.add(id(site.report))
            yield ctx.report(
                self,
                site.report,
                f"This checkpoint does not save the GradScaler's state, so a resumed run restarts "
                f"the loss scale at its initial value; save `{name}.state_dict()` with it.",
                help=f"Save `{name}.state_dict()` in the checkpoint",
                related=via_related(ctx, site),
            )


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class CheckpointWithoutScalerMonitor(Monitor):
    """A training checkpoint without the state of an enabled GradScaler the run used."""

    rule = CheckpointWithoutScaler

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        import weakref

        self.scalers: weakref.WeakSet[GradScaler] = weakref.WeakSet()
        self.sites: set[Site | None] = set()

    def on_scaler_call(self, scaler: GradScaler, method: str, optimizer: Optimizer | None = None) -> None:
        if method == "scale" and scaler not in self.scalers and scaler.is_enabled():
            self.scalers.add(scaler)

    def on_checkpoint_save(self, obj: object, path: str | None, site: Site | None = None) -> None:
        if path is None or site in self.sites or not len(self.scalers):
            return
        from traindoctor.facts.checkpoint.runtime import contents_for

        contents = contents_for(self.session, obj)
        if not contents.is_training_checkpoint or contents.has_scaler:
            return
        from traindoctor.runtime.live import site_kwargs

        self.sites.add(site)
        scale = None
        try:
            scale = float(next(iter(self.scalers)).get_scale())
        except Exception:
            pass
        self.report(
            "This checkpoint does not hold the GradScaler's state, so the loss scale restarts at "
            "its initial value on resume; save `scaler.state_dict()` too.",
            evidence={"path": path, "loss_scale_now": scale},
            step=self.session.step,
            **site_kwargs(site),
        )
