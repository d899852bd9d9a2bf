"""TD507 checkpoint-not-atomic: the training loop overwrites, in place, the checkpoint resume reads."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


class CheckpointNotAtomic(Rule):
    code = "TD507"
    name = "checkpoint-not-atomic"
    severity = Severity.INFO
    summary = (
        "The training loop writes the checkpoint straight onto the file that resume reads; write "
        "a temporary file and `os.replace` it."
    )
    gpu_only = False
    static = True
    runtime = False
    triggers = ("save",)
    fixable = "never"

    what_it_does = """
Reports a `torch.save` inside the training loop (directly, or in a local helper called from it)
whose target is the file a `torch.load` in the same file resumes from: the same path expression,
the same variable, the same string constant, or the same checkpoint file name such as `last.pt` or
`checkpoint.pth`. A path that changes every epoch or step (`f"ckpt_{epoch}.pt"`) does not
overwrite anything and is not reported.
"""
    why_bad = """
`torch.save(obj, "last.pt")` truncates the file and then writes it. If the process is killed,
preempted or runs out of disk space in between (checkpoints are large and the write takes seconds),
the only copy of the training state is left half-written and the next resume fails to load it, or
there is nothing to resume from. Writing to a temporary file in the same directory and renaming it
with `os.replace` is atomic on POSIX and Windows: the resume file is always either the old or the
new complete checkpoint.
"""
    example = """
for epoch in range(start, epochs):
    train_one_epoch(model, loader, optimizer)
    torch.save(state(), "last.pt")
"""
    use_instead = """
for epoch in range(start, epochs):
    train_one_epoch(model, loader, optimizer)
    torch.save(state(), "last.pt.tmp")
    os.replace("last.pt.tmp", "last.pt")

# or, atomic and complete:
traindoctor.checkpoint.save("last.pt", model=model, optimizer=optimizer, epoch=epoch)
"""
    references = (
        "https://docs.python.org/3/library/os.html#os.replace",
        "https://pytorch.org/docs/stable/generated/torch.save.html",
    )

    valid = (
        Valid(
            """
            import os
            import torch

            if os.path.exists("last.pt"):
                ckpt = torch.load("last.pt", weights_only=True)
            for epoch in range(10):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt.tmp")
                os.replace("last.pt.tmp", "last.pt")
            """
        ),
        # One file per epoch: nothing is overwritten.
        Valid(
            """
            import torch

            ckpt = torch.load(args.resume, weights_only=True)
            for epoch in range(10):
                train(model, loader, optimizer)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                           f"{args.out}/ckpt_{epoch}.pt")
            """
        ),
        # The resumed file is saved only once, after training.
        Valid(
            """
            import torch

            model.load_state_dict(torch.load("model.pt", weights_only=True))
            for epoch in range(10):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
            torch.save(model.state_dict(), "model.pt")
            """
        ),
    )
    invalid = (
        Invalid(
            """
            import os
            import torch

            if os.path.exists("last.pt"):
                ckpt = torch.load("last.pt", weights_only=True)
                model.load_state_dict(ckpt["model"])
                optimizer.load_state_dict(ckpt["optimizer"])
            for epoch in range(10):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")  # TD507
            """
        ),
        # Same variable, aliased import, keyword arguments.
        Invalid(
            """
            import os
            import torch as th

            ckpt_path = os.path.join(args.output_dir, "checkpoint.pth")
            if args.resume:
                state = th.load(ckpt_path, map_location="cpu", weights_only=True)
            for epoch in range(args.epochs):
                for step, batch in enumerate(loader):
                    model(**batch).loss.backward()
                    optimizer.step()
                    optimizer.zero_grad()
                    if step % 1000 == 0:
                        th.save(f=ckpt_path, obj={"model": model.state_dict(), "optimizer": optimizer.state_dict()})  # TD507
            """
        ),
        # Through a local helper called from the epoch loop; the same file name on both sides.
        Invalid(
            """
            import os
            import torch

            def save_checkpoint(state, out_dir):
                torch.save(state, os.path.join(out_dir, "latest.pth"))  # TD507

            def main(args):
                if args.resume:
                    ckpt = torch.load(os.path.join(args.resume_dir, "latest.pth"), weights_only=True)
                for epoch in range(args.epochs):
                    train_one_epoch(model, loader, optimizer)
                    save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, args.out_dir)

            def train_one_epoch(model, loader, optimizer):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.checkpoint.static.index import checkpoint_index

        idx = checkpoint_index(ctx)
        seen: set[int] = set()
        for site in idx.paths.overwritten_resume_files():
            if id(site.call) in seen:
                continue
            seen.add(id(site.call))
            yield ctx.report(
                self,
                site.call,
                "A crash while this save runs leaves a half-written copy of the file that resume "
                "loads; write to a temporary file and `os.replace` it (or use "
                "`traindoctor.checkpoint.save`, which is atomic).",
                help="Write to a temporary file, then `os.replace` it onto the checkpoint path",
            )
