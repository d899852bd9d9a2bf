"""TD505 resume-incomplete: the resume path restores the model but not the rest of the saved state."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.vocab import OPTIMIZER, SCALER, SCHEDULER

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

_WHAT = {OPTIMIZER: "optimizer", SCHEDULER: "LR scheduler", SCALER: "GradScaler"}
_DEFAULT = {OPTIMIZER: "optimizer", SCHEDULER: "scheduler", SCALER: "scaler"}


class ResumeIncomplete(Rule):
    code = "TD505"
    name = "resume-incomplete"
    severity = Severity.ERROR
    summary = (
        "The resume path restores the model but not the optimizer/scheduler/scaler state that "
        "the same file saves; load each saved state back."
    )
    gpu_only = False
    static = True
    runtime = False
    triggers = ("save",)
    fixable = "never"

    what_it_does = """
Finds the resume path of a training script, a `model.load_state_dict(ckpt["model"])` where
`ckpt = torch.load(...)`, and checks it against the checkpoints the same file writes: when a save
holds the model under that key together with the optimizer, LR scheduler or GradScaler state
(`"optimizer": optimizer.state_dict()`), the resume must load them back too. It reports the model
restore when no `load_state_dict` of that kind of object exists in the file and the saved key is
never read. A loaded checkpoint handed to an unknown function (which may restore the rest) is
left alone, and so is `traindoctor.checkpoint.load(...)`.
"""
    why_bad = """
Saving the optimizer, scheduler and scaler state is only half of a resumable checkpoint. If the
resume path loads only the model weights, the run continues with fresh optimizer moments, a
schedule restarted from step 0 and the initial loss scale: the effects described for TD501-TD503,
even though the file on disk holds everything needed. The saved state is dead weight and the bug is
easy to miss because resuming "works".
"""
    example = """
ckpt = torch.load("ckpt.pt", weights_only=True)
model.load_state_dict(ckpt["model"])
start_epoch = ckpt["epoch"] + 1
"""
    use_instead = """
ckpt = torch.load("ckpt.pt", weights_only=True)
model.load_state_dict(ckpt["model"])
optimizer.load_state_dict(ckpt["optimizer"])
scheduler.load_state_dict(ckpt["scheduler"])
start_epoch = ckpt["epoch"] + 1

# or: state = traindoctor.checkpoint.load("ckpt.pt", model=model, optimizer=optimizer,
#                                          scheduler=scheduler)
"""
    references = ("https://pytorch.org/tutorials/recipes/recipes/saving_and_loading_a_general_checkpoint.html",)

    valid = (
        Valid(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            if args.resume:
                ckpt = torch.load(args.resume, weights_only=True)
                model.load_state_dict(ckpt["model"])
                optimizer.load_state_dict(ckpt["optimizer"])
            for epoch in range(10):
                train(model, loader, optimizer)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")
            """
        ),
        # Loading pretrained weights (a key no save here writes next to optimizer state).
        Valid(
            """
            import torch

            model.load_state_dict(torch.load("pretrained.pt", weights_only=True)["state_dict"])
            optimizer = torch.optim.AdamW(model.parameters())
            for epoch in range(10):
                train(model, loader, optimizer)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")
            """
        ),
        # The loaded dict goes to a helper that may restore the rest.
        Valid(
            """
            import torch
            from mylib import restore_training_state

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            ckpt = torch.load("ckpt.pt", weights_only=True)
            model.load_state_dict(ckpt["model"])
            restore_training_state(ckpt, optimizer)
            for epoch in range(10):
                train(model, loader, optimizer)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "ckpt.pt")
            """
        ),
    )
    invalid = (
        Invalid(
            """
            import torch

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            start_epoch = 0
            if args.resume:
                ckpt = torch.load(args.resume, weights_only=True)
                model.load_state_dict(ckpt["model"])  # TD505
                start_epoch = ckpt["epoch"] + 1
            for epoch in range(start_epoch, 90):
                train(model, loader, optimizer)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "ckpt.pt")
            """
        ),
        # Aliases; optimizer restored but the scheduler (added to the dict later) is not.
        Invalid(
            """
            import torch as th
            from torch import load

            opt = th.optim.AdamW(model.parameters())
            sched = th.optim.lr_scheduler.StepLR(opt, 30)
            state = load("last.pt", map_location="cpu", weights_only=True)
            model.load_state_dict(state.get("net"))  # TD505
            opt.load_state_dict(state["opt"])
            for epoch in range(90):
                train(model, loader, opt)
                sched.step()
                ckpt = {"net": model.state_dict(), "opt": opt.state_dict()}
                ckpt["sched"] = sched.state_dict()
                th.save(ckpt, "last.pt")
            """
        ),
        # Resume in a function, the full state saved through a helper.
        Invalid(
            """
            import torch

            def save_checkpoint(state, path):
                torch.save(state, path)

            def resume(path, model):
                checkpoint = torch.load(path, weights_only=True)
                model.load_state_dict(checkpoint["state_dict"])  # TD505
                return checkpoint["epoch"]

            def main():
                scaler = torch.amp.GradScaler()
                optimizer = torch.optim.AdamW(model.parameters())
                start = resume("ckpt.pt", model)
                for epoch in range(start, 10):
                    train(model, loader, optimizer, scaler)
                    save_checkpoint({"state_dict": model.state_dict(), "optimizer": optimizer.state_dict(),
                                     "scaler": scaler.state_dict(), "epoch": epoch}, "ckpt.pt")
            """
        ),
        # torch.distributed.checkpoint: the load dict asks for the model only.
        Invalid(
            """
            import torch
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

            optimizer = torch.optim.AdamW(model.parameters())
            if args.resume:
                msd, osd = get_state_dict(model, optimizer)
                state = {"model": msd}
                dcp.load(state, checkpoint_id=args.resume)  # TD505
                set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict={})
            for epoch in range(10):
                train(model, loader, optimizer)
                msd, osd = get_state_dict(model, optimizer)
                dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=f"ckpt/{epoch}")
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.checkpoint.static.index import checkpoint_index
        from traindoctor.facts.checkpoint.static.vocabulary import DCP_LOADS

        if not ctx.method_calls("load_state_dict") and not ctx.calls_to(*DCP_LOADS):
            return
        idx = checkpoint_index(ctx)
        for call, gaps in idx.resume.resume_gaps():
            what = ", ".join(f'{_WHAT[kind]} (saved as "{key}")' for kind, key in gaps)
            kind, _key = gaps[0]
            owner = idx.resume.owner_of(kind, _key) or idx.objects.first_name(kind, _DEFAULT[kind])
            if ctx.qualname(call.func) in DCP_LOADS:
                yield ctx.report(
                    self,
                    call,
                    f"This `torch.distributed.checkpoint` load restores the model but not the "
                    f"{what} that this file saves: DCP fills only the keys of the dict it is "
                    "given; add them (`get_state_dict(model, optimizer)`) and apply them with "
                    "`set_state_dict`.",
                    help="Load the saved optimizer/scheduler/scaler state on resume",
                )
                continue
            via = idx.resume.saved_by.get(id(call), [])
            related = tuple(r for place in via for r in ctx.project.related(place, "the checkpoint is written here"))
            yield ctx.report(
                self,
                call,
                f"The resume restores the model but not the {what} that "
                f"{'the checkpoint this file writes holds' if via else 'this file saves'}; call "
                f"`{owner}.load_state_dict(...)` for each.",
                help="Load the saved optimizer/scheduler/scaler state on resume",
                related=related,
            )
