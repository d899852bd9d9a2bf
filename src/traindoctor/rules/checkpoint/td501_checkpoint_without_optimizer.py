"""TD501 checkpoint-without-optimizer: a training checkpoint holds model weights but no optimizer state."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    from torch.optim import Optimizer

    from traindoctor.facts.checkpoint.runtime import SeenSave
    from traindoctor.runtime.live import Site
    from traindoctor.static.context import FileContext


class CheckpointWithoutOptimizer(Rule):
    code = "TD501"
    name = "checkpoint-without-optimizer"
    severity = Severity.ERROR
    summary = (
        "A training checkpoint saves the model weights but not the optimizer state; save "
        "`optimizer.state_dict()` with them."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("save",)  # ``save_only_model`` included
    fixable = "never"

    what_it_does = """
Checks the checkpoints a training script writes inside its training loop (`torch.save(obj, path)`,
directly or through a local helper such as `save_checkpoint(state, path)`) and reports the ones
that hold model weights (`model.state_dict()`, `model.module.state_dict()`, or a dict holding one,
including a dict built up over several statements) but no optimizer state, in a file that builds
an optimizer and trains.

A weights-only save is treated as an *export*, not a checkpoint, and is not reported when:

- it runs after the training loop (e.g. `torch.save(model.state_dict(), "final.pt")` at the end);
- another save in the same file already writes the optimizer state (a separate full checkpoint
  makes the weights-only file a "best model" export, wherever it is written);
- the checkpoint is written by `traindoctor.checkpoint.save(...)`, `accelerator.save_state()`, or
  an unknown function that receives the optimizer (it may well save it).

A lone weights-only save inside the training loop is reported, whatever its file is called: it is
the only thing a crashed run could resume from.

A checkpoint written as several files one after another, in one block (a GAN's `netG.pt` and
`netD.pt`, or melgan's `netG.pt`, `optG.pt`, `netD.pt`, `optD.pt`), is one checkpoint: judged as
a whole (an optimizer saved in its own file counts), reported once, at its first file, naming the
optimizer of each model, with the other files as related locations. `traindoctor run` groups the
saves made between two training steps the same way. Files that hold the same state (`last.pt` and
`epoch_10.pt` with the same model) are copies, each judged alone.

Framework forms: Hugging Face `TrainingArguments(save_only_model=True)` makes every Trainer
checkpoint weights-only (no optimizer, scheduler, scaler or RNG state), so
`trainer.train(resume_from_checkpoint=...)` cannot resume the run; it is reported at the keyword
unless `save_strategy="no"`. The frameworks' own checkpoints are complete and never reported:
Lightning's `trainer.save_checkpoint(...)` and `ModelCheckpoint`, accelerate's
`accelerator.save_state(...)`. Fabric's `fabric.save(path, state)` is judged by what `state` holds.
"""
    why_bad = """
A model checkpoint without the optimizer state cannot resume training faithfully. SGD with
momentum keeps a velocity buffer per parameter and Adam/AdamW keep first and second moment
estimates and a step count (used for bias correction). Resuming from weights alone restarts these
from zero: Adam takes its bias-corrected first steps again with a tiny second-moment estimate,
which produces a burst of oversized updates, and momentum SGD loses its velocity. The loss curve
jumps after every resume and the run is not the one you would have had without the interruption.
"""
    example = """
for epoch in range(start_epoch, epochs):
    train_one_epoch(model, loader, optimizer)
    torch.save(model.state_dict(), "checkpoint.pt")
"""
    use_instead = """
for epoch in range(start_epoch, epochs):
    train_one_epoch(model, loader, optimizer)
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
        "checkpoint.pt",
    )

# or, with everything a resume needs (scheduler, scaler, RNG, sampler) written atomically:
import traindoctor.checkpoint

traindoctor.checkpoint.save("checkpoint.pt", model=model, optimizer=optimizer, epoch=epoch)
"""
    options = """
    No thresholds. At run time every `torch.save` to a named file is inspected in place (nothing
    is copied): it holds weights of a live model (a mapping covering at least half of the model's
    `state_dict()` keys, or only keys of it, or the module itself) but no optimizer state that
    matches, by param-group sizes, a live optimizer of that model. Saves into in-memory buffers
    (`io.BytesIO`) are ignored.
    """
    references = (
        "https://pytorch.org/tutorials/recipes/recipes/saving_and_loading_a_general_checkpoint.html",
        "https://pytorch.org/docs/stable/optim.html#torch.optim.Optimizer.state_dict",
    )

    valid = (
        Valid(
            """
            import torch

            model = Net()
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
            for epoch in range(10):
                for x, y in loader:
                    loss = loss_fn(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
            """
        ),
        # A "best model" export next to a full checkpoint built up in a dict.
        Valid(
            """
            import torch as th

            model = Net()
            opt = th.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            best = 0.0
            for epoch in range(90):
                train(model, loader, opt)
                acc = evaluate(model, val_loader)
                if acc > best:
                    best = acc
                    th.save(model.state_dict(), "best.pt")
                ckpt = {"model": model.state_dict(), "epoch": epoch}
                ckpt["optimizer"] = opt.state_dict()
                th.save(ckpt, "checkpoint.pt")

            def train(model, loader, opt):
                for x, y in loader:
                    opt.zero_grad()
                    criterion(model(x), y).backward()
                    opt.step()
            """
        ),
        # Final weights after training are an export, not a checkpoint.
        Valid(
            """
            import torch

            model = Net()
            optimizer = torch.optim.Adam(model.parameters())
            for epoch in range(5):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
            torch.save(model.state_dict(), "model_final.pt")
            """
        ),
        # traindoctor's checkpoint is complete; a weights export beside it is fine.
        Valid(
            """
            import torch
            import traindoctor.checkpoint

            model = Net()
            optimizer = torch.optim.AdamW(model.parameters())
            for epoch in range(5):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                traindoctor.checkpoint.save("ckpt.pt", model=model, optimizer=optimizer, epoch=epoch)
                torch.save(model.state_dict(), f"weights_{epoch}.pt")
            """
        ),
        # torch.distributed.checkpoint: model and optimizer through get_state_dict.
        Valid(
            """
            import torch
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_state_dict

            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
            for epoch in range(10):
                for x, y in loader:
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                    optimizer.zero_grad()
                msd, osd = get_state_dict(model, optimizer)
                dcp.save({"model": msd, "optim": osd}, checkpoint_id=f"ckpt/{epoch}")
            """
        ),
        # Inference script: no optimizer, no training.
        Valid(
            """
            import torch

            model = Net()
            model.load_state_dict(torch.load("weights.pt", weights_only=True))
            for shard in shards:
                torch.save(model.state_dict(), shard)
            """
        ),
        Valid("""
    import lightning as L

    trainer = L.Trainer(max_epochs=10)
    for stage in range(3):
        trainer.fit(model, datamodule=dm)
        trainer.save_checkpoint(f"stage{stage}.ckpt")  # Lightning's checkpoint holds everything
    """),
        Valid("""
    from transformers import Trainer, TrainingArguments

    # nothing is saved during training
    args = TrainingArguments(output_dir="out", save_strategy="no", save_only_model=True)
    Trainer(model=model, args=args, train_dataset=train_ds).train()
    """),
    )
    invalid = (
        Invalid(
            """
            import torch

            model = Net().cuda()
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
            for epoch in range(10):
                for x, y in loader:
                    loss = loss_fn(model(x.cuda()), y.cuda())
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                torch.save(model.state_dict(), f"ckpt_{epoch}.pt")  # TD501
            """
        ),
        # Aliased import, DDP-wrapped model, keyword arguments, dict built incrementally.
        Invalid(
            """
            from torch import save as save_ckpt
            import torch.optim as optim

            model = DDP(Net().cuda())
            opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            for epoch in range(90):
                for step, (x, y) in enumerate(loader):
                    opt.zero_grad()
                    criterion(model(x), y).backward()
                    opt.step()
                state = {"epoch": epoch}
                state["model"] = model.module.state_dict()
                save_ckpt(obj=state, f="checkpoint.pth")  # TD501
            """
        ),
        # Through a local helper: reported where the caller decides what is saved.
        Invalid(
            """
            import torch

            def save_checkpoint(state, filename="checkpoint.pth.tar"):
                torch.save(state, filename)

            def train_one_epoch(model, loader, optimizer):
                for images, target in loader:
                    loss = criterion(model(images), target)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()

            def main():
                model = resnet50()
                optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9)
                for epoch in range(90):
                    train_one_epoch(model, loader, optimizer)
                    save_checkpoint({"epoch": epoch + 1, "state_dict": model.state_dict()})  # TD501
            """
        ),
        Invalid("""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir="out",
        save_steps=500,
        save_only_model=True,  # TD501
    )
    Trainer(model=model, args=args, train_dataset=train_ds).train(resume_from_checkpoint=True)
    """),
        # A model-only torch.distributed.checkpoint save of an FSDP2 model.
        Invalid(
            """
            import torch
            import torch.distributed.checkpoint as dcp
            from torch.distributed.checkpoint.state_dict import get_model_state_dict
            from torch.distributed.fsdp import fully_shard

            model = fully_shard(Net())
            optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
            for step, (x, y) in enumerate(loader):
                loss_fn(model(x), y).backward()
                optimizer.step()
                optimizer.zero_grad()
                if step % 1000 == 0:
                    dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=f"ckpt/{step}")  # TD501
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.checkpoint.static.advice import left_out_by_helper, left_out_of_several, via_related
        from traindoctor.facts.checkpoint.static.index import checkpoint_index
        from traindoctor.finding import Related
        from traindoctor.static.vocab import OPTIMIZER

        yield from _hf_save_only_model(self, ctx)
        idx = checkpoint_index(ctx)
        if idx.objects.optimizers_are_stateless():
            return  # plain SGD keeps no state that a resumed run could miss
        opt = idx.objects.first_name(OPTIMIZER, "optimizer")
        from traindoctor.facts.checkpoint.static.vocabulary import DCP_SAVES

        for site in idx.checkpoints.model_only_in_loop():
            files = [site, *idx.checkpoints.written_with(site)]
            # one optimizer per weights file of the checkpoint (a GAN's G and D files)
            names = list(dict.fromkeys(idx.checkpoints.optimizer_for(s, opt) for s in files))
            saves = [f"{n}.state_dict()" for n in names]
            if ctx.qualname(site.call.func) in DCP_SAVES:
                # Sharded (FSDP/DTensor) optimizer state needs DCP's own getter.
                saves = [f"get_optimizer_state_dict(model, {n})" for n in names]
            save = "` and `".join(saves)
            yield ctx.report(
                self,
                site.report,
                f"This checkpoint saves model weights without the optimizer state, so a resumed "
                f"run restarts momentum/Adam moments; save `{save}` with them.",
                help=f"Save `{save}` in the checkpoint",
                related=via_related(ctx, site)
                + tuple(
                    Related(ctx.filename, ctx.location(other.report), "another weights file of this checkpoint")
                    for other in idx.checkpoints.written_with(site)
                ),
            )
        reported = {id(site.report) for site in idx.checkpoints.model_only_in_loop()}
        for site in idx.checkpoints.missing_beside_best(OPTIMIZER):
            if id(site.report) in reported:
                continue
            reported.add(id(site.report))
            yield ctx.report(
                self,
                site.report,
                f"This checkpoint saves model weights without the optimizer state (only the "
                f"best-so-far or final save holds it), so a run resumed from it restarts momentum/Adam "
                f"moments; save `{opt}.state_dict()` with them.",
                help=f"Save `{opt}.state_dict()` in the checkpoint",
                related=via_related(ctx, site),
            )
        for site, message, help in left_out_by_helper(idx.checkpoints, OPTIMIZER, "momentum/Adam moments"):
            if id(site.report) not in reported:
                yield ctx.report(self, site.report, message, help=help, related=via_related(ctx, site))
        for site, message, help in left_out_of_several(
            idx.checkpoints, OPTIMIZER, "optimizers", "its momentum/Adam moments"
        ):
            yield ctx.report(self, site.report, message, help=help, related=via_related(ctx, site))


def _hf_save_only_model(rule: Rule, ctx: FileContext) -> Iterable[Finding]:
    """``TrainingArguments(save_only_model=True)``: the Trainer's checkpoints hold the weights only."""
    from traindoctor.facts.frameworks.static import hf_training_args

    for args in hf_training_args(ctx):
        if args.value(ctx, "save_only_model") is not True or args.value(ctx, "save_strategy") == "no":
            continue
        yield ctx.report(
            rule,
            args.anchor(ctx, "save_only_model"),
            "`save_only_model=True` makes the Trainer's checkpoints hold only the model weights "
            "(no optimizer, scheduler, scaler or RNG state), so `resume_from_checkpoint` cannot "
            "resume the run; drop it and keep checkpoints small with `save_total_limit`.",
            help="Remove `save_only_model=True`",
        )


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class CheckpointWithoutOptimizerMonitor(Monitor):
    """``torch.save`` of objects that hold a live model's weights but not the state of a live
    optimizer that updates that model (see ``facts.checkpoint.runtime``). The saves made between
    two training steps are one checkpoint (``WrittenTogether``): judged together, reported once,
    at the first file that holds weights. One finding per ``torch.save`` line."""

    rule = CheckpointWithoutOptimizer

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        from traindoctor.facts.checkpoint.runtime import WrittenTogether

        self.sites: set[Site | None] = set()
        self.pending = WrittenTogether()

    def on_checkpoint_save(self, obj: object, path: str | None, site: Site | None = None) -> None:
        if path is None:
            return
        from traindoctor.facts.checkpoint.kinds import EXPORT
        from traindoctor.facts.checkpoint.runtime import SeenSave, contents_for, save_kind_of

        contents = contents_for(self.session, obj)
        if not (contents.has_model or contents.has_optimizer):
            return  # samples, metrics: no part of a checkpoint
        if contents.has_model and save_kind_of(self.session, contents, path, site) == EXPORT:
            return  # a weights export (best/final model, never read back): not a checkpoint
        done = self.pending.add(SeenSave(contents, path, site, self.session.step))
        if done:
            self._judge(done)

    def on_backward(self) -> None:
        if self.pending.saves:
            self._judge(self.pending.take())

    def on_before_optimizer_step(self, optimizer: Optimizer) -> None:
        if self.pending.saves:
            self._judge(self.pending.take())

    def on_run_end(self) -> None:
        if self.pending.saves:
            self._judge(self.pending.take())

    def _judge(self, saves: list[SeenSave]) -> None:
        from traindoctor.facts.checkpoint.runtime import merged_contents, missing_optimizers

        weights = [s for s in saves if s.contents.has_model]
        if not weights or weights[0].site in self.sites:
            return
        first = weights[0]
        missing = missing_optimizers(self.session, merged_contents([s.contents for s in saves]))
        if not missing:
            return
        from traindoctor.runtime.live import site_kwargs

        self.sites.add(first.site)
        names = [type(o).__name__ for o in missing]
        # the other files of the checkpoint, when it is written as several
        files = {"files": [s.path for s in saves]} if len(saves) > 1 else {}
        self.report(
            f"This checkpoint holds the model's weights but not the state of its {', '.join(names)} "
            "optimizer" + ("s" if len(names) > 1 else "") + ", so momentum/moments restart on resume; save "
            "`optimizer.state_dict()` too (`traindoctor.checkpoint.save(path, model=..., optimizer=...)`).",
            evidence={
                "path": first.path,
                **files,
                "missing_optimizers": names,
                "optimizer_states_saved": sum(
                    len(s.contents.optimizer_states) + len(s.contents.optimizer_objects) for s in saves
                ),
            },
            step=first.step,
            **site_kwargs(first.site),
        )
