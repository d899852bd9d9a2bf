"""TD504 checkpoint-without-rng: the checkpoint lacks (part of) the RNG state the run draws from."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.vocab import DATA, RNG_CPU, RNG_CUDA, RNG_NUMPY, RNG_PYTHON

if TYPE_CHECKING:  # pragma: no cover
    from torch.optim import Optimizer

    from traindoctor.facts.checkpoint.runtime import SeenSave
    from traindoctor.facts.checkpoint.static.index import CheckpointIndex
    from traindoctor.facts.checkpoint.static.saves import SaveSite
    from traindoctor.runtime.live import Site
    from traindoctor.static.context import FileContext

#: What to save for each missing piece, in the order the message lists them.
_REMEDY = {
    RNG_CPU: "`torch.get_rng_state()`",
    RNG_CUDA: "`torch.cuda.get_rng_state_all()`",
    RNG_NUMPY: "`np.random.get_state()`",
    RNG_PYTHON: "`random.getstate()`",
    DATA: "the sampler/data position (e.g. the step within the epoch)",
}
_LABEL = {
    RNG_CPU: "the torch CPU generator",
    RNG_CUDA: "the CUDA generators",
    RNG_NUMPY: "NumPy's global generator",
    RNG_PYTHON: "Python's `random` generator",
    DATA: "the data position within the epoch",
}


class CheckpointWithoutRng(Rule):
    code = "TD504"
    name = "checkpoint-without-rng"
    severity = Severity.WARNING
    summary = (
        "A training checkpoint lacks RNG state the run draws from (torch CPU, CUDA, NumPy, Python "
        "`random`) or, when saved mid-epoch, the data position; save them with the checkpoint."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("save",)
    fixable = "never"

    what_it_does = """
Reports a training checkpoint (one that holds optimizer state, or a weights-only save inside the
training loop when nothing else saves the optimizer; saves in test files are round-trip fixtures,
not checkpoints) that misses part of the random state the run draws from:

- the torch CPU generator (`torch.get_rng_state()`), always;
- the CUDA generators (`torch.cuda.get_rng_state_all()`) when the script uses CUDA;
- NumPy's global generator (`np.random.get_state()`) when the file draws from `np.random.*`;
- Python's generator (`random.getstate()`) when the file draws from `random.*`;
- the sampler/data position when the checkpoint is written inside the batch loop (mid-epoch). At
  an epoch boundary the saved epoch counter is the data position.

Weight exports (saves after the training loop, or weights-only files next to a full checkpoint)
are not checked, and `traindoctor.checkpoint.save(...)` saves all of it. A checkpoint written as
several files one after another (`netG.pt`, `optG.pt`, `netD.pt`, `optD.pt`; an `rng.pt` beside
them counts) is judged as one and reported once, at its first file, by `check` and `run` alike.
"""
    why_bad = """
Without the generator states a resumed run is a different run: data order (a shuffling sampler
draws from the torch CPU generator), dropout masks (CUDA generator for CUDA tensors), and
augmentations (often NumPy or `random`) all diverge from the uninterrupted run, so a crash
changes the result and a resumed run cannot be compared with, or debugged against, the original.
Saving only `torch.get_rng_state()` is a common half-measure: on a GPU the dropout masks come from
the per-device CUDA generators, which it does not include. A checkpoint taken mid-epoch also needs
the position in the epoch, or the resumed run replays (or skips) part of the data.
"""
    example = """
torch.save(
    {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
     "rng": torch.get_rng_state()},  # CPU only; the run uses CUDA and NumPy
    "ckpt.pt",
)
"""
    use_instead = """
torch.save(
    {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": {
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all(),
            "numpy": np.random.get_state(),
            "python": random.getstate(),
        },
        "epoch": epoch,
    },
    "ckpt.pt",
)

# or: traindoctor.checkpoint.save("ckpt.pt", model=model, optimizer=optimizer, sampler=sampler,
#                                 step=step, epoch=epoch)  # saves every RNG and the data position
"""
    options = """
    No thresholds. At run time the global generators (torch CPU, CUDA, NumPy's legacy global,
    Python's `random`) are snapshotted at the first optimizer step; each one whose state moved by
    the time of a save must be in the checkpoint (recognised by structure, not by key). When a
    DataLoader is part-way through an epoch, an integer entry whose key names a position (step,
    iter, batch, index, ...) is needed too. Generators the script creates itself
    (`np.random.default_rng()`, `torch.Generator()`) are not tracked.
    """
    references = (
        "https://pytorch.org/docs/stable/notes/randomness.html",
        "https://pytorch.org/docs/stable/random.html",
        "https://pytorch.org/docs/stable/cuda.html#random-number-generator",
    )

    valid = (
        Valid(
            """
            import torch

            optimizer = torch.optim.AdamW(model.parameters())
            for epoch in range(10):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "rng": torch.get_rng_state(), "epoch": epoch}, "ckpt.pt")
            """
        ),
        # CUDA and NumPy are used, and both are saved (dict built incrementally).
        Valid(
            """
            import numpy as np
            import torch as th

            model = Net().cuda()
            opt = th.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                for x, y in loader:
                    x = x + np.random.normal(0, 0.1, x.shape)
                    opt.zero_grad()
                    loss_fn(model(x.cuda()), y.cuda()).backward()
                    opt.step()
                ckpt = {"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch}
                ckpt["rng"] = {"cpu": th.get_rng_state(), "cuda": th.cuda.get_rng_state_all(),
                               "numpy": np.random.get_state()}
                th.save(ckpt, "ckpt.pt")
            """
        ),
        # A weights export after training is not a training checkpoint.
        Valid(
            """
            import torch

            optimizer = torch.optim.AdamW(model.parameters())
            for epoch in range(10):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
            torch.save(model.state_dict(), "model.pt")
            """
        ),
        # RNG state produced by a helper whose key says what it is.
        Valid(
            """
            import torch

            optimizer = torch.optim.AdamW(model.parameters())
            for step, batch in enumerate(loader):
                model(**batch).loss.backward()
                optimizer.step()
                if step % 1000 == 0:
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                "rng_states": collect_rng_states(), "step": step}, "ckpt.pt")
            """
        ),
        # Random batches (nanoGPT's get_batch) in a `while` loop: no DataLoader, no data position.
        Valid(
            """
            import torch

            optimizer = torch.optim.AdamW(model.parameters())
            while True:
                X, Y = get_batch("train")
                model(X, Y).backward()
                optimizer.step()
                if should_checkpoint():
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                "rng": torch.get_rng_state()}, "ckpt.pt")
            """
        ),
    )
    invalid = (
        Invalid(
            """
            import torch

            optimizer = torch.optim.AdamW(model.parameters())
            for epoch in range(10):
                train_one_epoch(model, loader, optimizer)
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "ckpt.pt")  # TD504
            """
        ),
        # Only the CPU generator, in a CUDA script that also uses Python's random.
        Invalid(
            """
            import random
            import torch as th

            model = Net().to("cuda")
            optim = th.optim.Adam(model.parameters())
            for epoch in range(10):
                random.shuffle(files)
                for x, y in loader:
                    optim.zero_grad()
                    loss_fn(model(x), y).backward()
                    optim.step()
                state = dict(model=model.state_dict(), optim=optim.state_dict(), epoch=epoch)
                state["rng"] = th.get_rng_state()
                th.save(state, "ckpt.pt")  # TD504
            """
        ),
        # Saved mid-epoch: every RNG is there but not the position in the epoch.
        Invalid(
            """
            import torch
            from torch import save

            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(10):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss_fn(model(x), y).backward()
                    optimizer.step()
                    if should_checkpoint():
                        save(  # TD504
                            {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                             "rng": torch.get_rng_state(), "epoch": epoch},
                            "ckpt.pt",
                        )
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.checkpoint.static.advice import via_related
        from traindoctor.facts.checkpoint.static.index import checkpoint_index
        from traindoctor.facts.checkpoint.static.rng import file_draws
        from traindoctor.static.vocab import RNG_KINDS

        idx = checkpoint_index(ctx)
        sites = idx.checkpoints.rng_checkpoints()
        if not sites:
            return
        draws = file_draws(ctx)
        missing_rng = [k for k in RNG_KINDS if k in draws and not idx.resume.kept_on_resume(k)]
        has_position = idx.saves.may_hold_anywhere(DATA)
        any_rng = any(idx.resume.kept_on_resume(k) for k in RNG_KINDS)
        for site in sites:
            missing = list(missing_rng)
            if site.mid_epoch and not has_position and _iterates_data(ctx, idx, site):
                missing.append(DATA)
            if not missing:
                continue
            remedy = ", ".join(_REMEDY[k] for k in missing)
            if not any_rng:
                message = (
                    f"This checkpoint saves no RNG state, so a resumed run draws different random "
                    f"numbers; save {remedy} with it."
                )
            else:
                what = ", ".join(_LABEL[k] for k in missing)
                message = f"This checkpoint misses {what}, so a resumed run diverges; save {remedy} with it."
            yield ctx.report(
                self,
                site.report,
                message,
                help="Save the missing RNG state in the checkpoint",
                related=via_related(ctx, site),
            )


def _is_counter(expr: object) -> bool:
    """``range(n)``, ``itertools.count()``, ``tqdm(range(n))``, ``enumerate(range(n))``: a step
    counter, not a data stream with a position."""
    import ast

    while isinstance(expr, ast.Call):
        func = expr.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in ("range", "trange", "count"):
            return True
        if name in ("enumerate", "tqdm") and expr.args:
            expr = expr.args[0]
            continue
        return False
    return False


def _iterates_data(ctx: FileContext, idx: CheckpointIndex, site: SaveSite) -> bool:
    """The save sits in a ``for`` loop over a data iterable (a loader): only then is there a data
    position to lose. A ``while True``/``range`` loop that samples batches (nanoGPT's
    ``get_batch``) has none, and the runtime half agrees (it asks only for a DataLoader that is
    part-way through its epoch)."""
    import ast

    batch = idx.loops.batch_loops
    for node in site.contexts:
        for loop in ctx.enclosing_loops(node):
            if id(loop) in batch and isinstance(loop, ast.For) and not _is_counter(loop.iter):
                return True
    return False


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class CheckpointWithoutRngMonitor(Monitor):
    """A training checkpoint that misses RNG states the run draws from, or the data position.

    The global generators (torch CPU, CUDA, NumPy's legacy global, Python's ``random``) are
    snapshotted at the first optimizer step; at each save, the ones whose state moved since then
    are in use and must be in the checkpoint. A save while a DataLoader is part-way through an
    epoch also needs the position (an integer entry named like step/iter/batch/index).
    """

    rule = CheckpointWithoutRng

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        from traindoctor.facts.checkpoint.runtime import RngUse, WrittenTogether

        self.rng = RngUse()
        self.sites: set[Site | None] = set()
        #: The saves since the last training step: one checkpoint, judged together (TD501's way).
        self.pending = WrittenTogether()

    def on_optimizer_found(self, optimizer: Optimizer) -> None:
        if not self.rng.taken:
            self.rng.snapshot(bool(getattr(self.session, "uses_cuda", False)))

    def on_checkpoint_save(self, obj: object, path: str | None, site: Site | None = None) -> None:
        if path is None or not self.rng.taken:
            return
        from traindoctor.facts.checkpoint.kinds import EXPORT
        from traindoctor.facts.checkpoint.runtime import SeenSave, contents_for, mid_epoch_position, save_kind_of

        contents = contents_for(self.session, obj)
        if not (contents.has_model or contents.has_optimizer or contents.rng or contents.int_keys):
            return  # samples, metrics: no part of a checkpoint
        if contents.has_model and save_kind_of(self.session, contents, path, site) == EXPORT:
            return  # the checker's definition: periodic or read back is a checkpoint
        # the streams in use and the data position as they were at this save
        extra = (self.rng.used(), mid_epoch_position(self.session))
        done = self.pending.add(SeenSave(contents, path, site, self.session.step, extra))
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
        from traindoctor.facts.checkpoint.runtime import merged_contents

        contents = merged_contents([s.contents for s in saves])
        if not contents.is_training_checkpoint:
            return  # no model, or bare weights: TD501's alone (its full-state fix saves the RNG too)
        first = next((s for s in saves if s.contents.has_model), saves[0])
        if first.site in self.sites:
            return
        used, position = first.extra
        missing = [name for name in used if name not in contents.rng]
        need_position = position is not None and not contents.has_position()
        if not missing and not need_position:
            return
        from traindoctor.runtime.live import site_kwargs

        self.sites.add(first.site)
        parts = []
        if missing:
            parts.append(f"the {', '.join(missing)} RNG state(s) the run draws from")
        if need_position and position is not None:
            parts.append(f"the data position (saved at batch {position[0]} of {position[1]})")
        self.report(
            f"This checkpoint misses {' and '.join(parts)}, so a resumed run does not continue "
            "the same random stream; save them too (`traindoctor.checkpoint.save` does).",
            evidence={
                "path": first.path,
                **({"files": [s.path for s in saves]} if len(saves) > 1 else {}),
                "missing_rng": missing,
                "rng_in_use": used,
                "rng_saved": sorted(contents.rng),
                "mid_epoch": list(position) if position else None,
            },
            step=first.step,
            **site_kwargs(first.site),
        )
