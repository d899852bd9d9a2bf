"""TD102 loader-in-main-process: a training DataLoader loads every batch in the training process."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING, cast

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.args import MISSING, UNKNOWN
from traindoctor.static.vocab import HF_TRIGGERS

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.records import LoaderInfo
    from traindoctor.static.context import FileContext

_HELP = "Pass `num_workers` (for example 4)"


class LoaderInMainProcess(Rule):
    code = "TD102"
    name = "loader-in-main-process"
    severity = Severity.WARNING
    summary = (
        "A training DataLoader runs with `num_workers=0`, so the training loop itself loads and "
        "collates every batch; pass `num_workers` > 0 to load batches in parallel worker processes."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("DataLoader", *HF_TRIGGERS)
    project_aware = True
    fixable = "never"
    options = """
    Runtime thresholds (`thresholds` in `[tool.traindoctor]`, `--threshold KEY=VALUE` or
    `watch(thresholds=...)`). A `num_workers=0` loader is reported only when both hold:

    - `TD102.min_wait_share` (default 0.2): the time the loop waited inside `next()` for this
      loader's batches, as a share of the time the loader was being iterated.
    - `TD102.min_wait_ms` (default 5.0): the mean wait per batch in milliseconds. Batches of
      in-memory tensors that take about a millisecond to assemble would only get slower with
      worker processes (inter-process copies), so they stay silent.
    - `TD102.min_batches` (default 5): batches seen before judging.

    The recommended worker count comes from a model of the measured pipeline
    (`traindoctor.facts.data.pipeline`): the time and the CPU time the loop spent loading a batch, the time
    it spent training on it, the cores this process may use (`os.sched_getaffinity`) and the
    training process's intra-op threads (`torch.get_num_threads()`). It is the fewest workers
    predicted within 5% of the fastest, up to the model's worker ceiling (the one TD104 and
    `traindoctor tune` use: the cores the training process leaves free, more than the cores for
    loading that mostly waits); a loader that sleeps or waits on I/O needs little CPU per
    worker, a CPU-bound one competes with the training threads. The loading's CPU share leaves
    out the time the training thread waited for a core (Linux `schedstat`), so a busy machine
    does not make CPU-bound loading look like I/O. The predicted speed-up is a range when other
    programs kept cores busy during the run: from the cores they left free (the workers then
    compete with them) to all of them. When the prediction is uncertain (the range reaches below
    a 1.15x gain, the CPU cost of loading was not measured, the workers would share cores with
    the training threads, or the gain is small) the message says so: `traindoctor tune SCRIPT`
    then measures it with the model in the loop.
    """

    what_it_does = """
    Reports a training `DataLoader` whose `num_workers` is missing (the default is 0) or 0, read
    from a keyword, the sixth positional argument, a module constant, a literal `**kwargs` dict or
    an argparse default in the same file. It stays silent when the value cannot be known (a config
    object, a function parameter, an opaque `**kwargs`), for evaluation loaders (iterated only
    under `no_grad`, in an evaluation function, or by a loop that runs its model under `no_grad`
    and steps no optimizer: feature extraction), for loops that never read their batches (a
    loader benchmark), for a loader that
    is only used once for `next(iter(loader))` (a batch to look at, not a pass that trains), for
    datasets of in-memory tensors (indexing them takes microseconds and worker processes would
    only add inter-process copies), for `IterableDataset` subclasses (workers need sharding
    code) and for datasets whose items are already on the GPU (a `__getitem__` that returns
    `x.cuda()` or `x.to(device)`: CUDA does not work in forked workers), and in files with no sign of training (no `backward()`, no optimizer). In-memory
    datasets are `TensorDataset`, Lightning's demo datasets (`WikiText2`, `RandomDataset`), and
    `Dataset` classes of the file or of a project module whose `__getitem__` only slices data the
    instance holds (with cheap conversions such as `torch.tensor(...)` or `torch.flip(...)`),
    followed through `random_split`, `functools.partial`, branches that rebind the name, helper
    functions that return them and parameters that every caller fills with one.

    At run time the same code is reported only when the data wait is measured to be a large share
    of the step.

    Framework forms: Hugging Face `TrainingArguments` without `dataloader_num_workers` (its
    default is 0) or with 0, in a script that trains a `Trainer` (reported at the keyword, or at
    the call when it is missing). Arguments parsed from the command line
    (`HfArgumentParser(...).parse_args_into_dataclasses()`) hold their defaults, as argparse
    options do (reported at the parse); arguments read from a JSON/YAML file are unknown and left
    alone. Config values come from the project's configuration: argparse defaults, config files
    the script loads, yacs defaults, config classes (dataclasses, Tap, plain classes), Hydra
    configs. A Lightning module's `train_dataloader()` (or the method a DataModule binds to it in
    `__init__`, `self.train_dataloader = self._train_dataloader`) is a training loader like any
    other.

    Loaders built by project helpers are followed through the helpers' returns: a helper that
    returns another function's loader (`construct_train_loader()` -> `_construct_loader(...)`,
    the callee's parameters bound to what the call passes), loaders returned in a tuple, list or
    dict and read by unpacking or a constant index or key (`loaders[0]`, `data["train"]`), and
    `**kwargs` dicts bound in the same branch as the DataLoader.
    """
    why_bad = """
    With `num_workers=0` the main process reads, decodes, augments and collates each batch while
    the model waits, so data loading time adds to every step instead of overlapping with it.
    With workers, `num_workers` processes prepare batches ahead of time (`prefetch_factor` each)
    while the main process trains.

    Workers are not free: each is a process with a copy of the dataset object, batches travel back
    through shared memory, and on platforms that start processes with `spawn` (Windows, macOS) the
    dataset and `collate_fn` must be picklable and the script needs an
    `if __name__ == "__main__":` guard. A good start is a few workers per GPU, not more than the
    CPU cores available to each process.
    """
    example = """
    train_loader = DataLoader(train_ds, batch_size=64, shuffle=True)
    """
    use_instead = """
    train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, num_workers=4, pin_memory=True,
                              persistent_workers=True)

    # or size the workers from the machine:
    from traindoctor.recipes import loader_kwargs
    train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, **loader_kwargs(train_ds))
    """
    fix_safety = """
    No fix is offered: worker processes need a picklable dataset and `collate_fn`, a
    `__main__` guard under the `spawn` start method, and a worker count that fits the machine.
    """
    references = (
        "https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading",
        "https://pytorch.org/docs/stable/data.html#platform-specific-behaviors",
        "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#enable-async-data-loading-and-augmentation",
    )

    valid = (
        Valid(
            """
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=64, shuffle=True, num_workers=8)
            for x, y in loader:
                model(x).sum().backward()
            """
        ),
        # In-memory tensors: workers would only add inter-process copies.
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader, TensorDataset

            ds = TensorDataset(torch.randn(1000, 10), torch.randn(1000, 1))
            loader = DataLoader(ds, batch_size=32, shuffle=True)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            """
        ),
        # Evaluation loaders: by name, and by being iterated only under no_grad.
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            test_loader = DataLoader(test_set, batch_size=256)
            loader = DataLoader(holdout, batch_size=256)
            with torch.no_grad():
                for x, y in loader:
                    model(x)
            loss.backward()
            """
        ),
        # Feature extraction: the loop runs the encoder under no_grad and steps no optimizer
        # (`len(loader)` in the log line says nothing about what the loader is for).
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(images, batch_size=256, shuffle=True)
            feats = []
            for step, (x, y) in enumerate(loader):
                with torch.no_grad():
                    feats.append(encoder(x))
                print(step, len(loader))
            opt = torch.optim.SGD(head.parameters(), lr=0.1)
            for epoch in range(100):
                head(torch.cat(feats)).sum().backward()
                opt.step()
            """
        ),
        # Unknown value: a config object and an opaque **kwargs.
        Valid(
            """
            from torch.utils.data import DataLoader

            a = DataLoader(train_ds, batch_size=cfg.bs, num_workers=cfg.workers)
            b = DataLoader(train_ds, **kwargs)
            loss.backward()
            """
        ),
        # A library helper in a file that never trains.
        Valid(
            """
            from torch.utils.data import DataLoader

            def make_loader(ds):
                return DataLoader(ds, batch_size=64)
            """
        ),
        Valid("""
        from transformers import HfArgumentParser, Trainer, TrainingArguments

        # the arguments come from a YAML file: unknown here
        (args,) = HfArgumentParser(TrainingArguments).parse_yaml_file("train.yaml")
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """),
        Valid("""
        from transformers import Trainer, TrainingArguments

        args = TrainingArguments(output_dir="out", dataloader_num_workers=8, dataloader_persistent_workers=True)
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """),
    )
    invalid = (
        Invalid(
            """
            from torch.utils.data import DataLoader

            train_loader = DataLoader(train_ds, batch_size=64, shuffle=True)  # TD102
            for epoch in range(10):
                for x, y in train_loader:
                    model(x).sum().backward()
            """
        ),
        # Positional num_workers (sixth parameter) through a module alias.
        Invalid(
            """
            import torch.utils.data as tud
            import torch

            loader = tud.DataLoader(ds, 32, True, None, None, 0)  # TD102
            optimizer = torch.optim.AdamW(model.parameters())
            """
        ),
        # Module constant and a literal **kwargs dict.
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader as DL

            WORKERS = 0
            kwargs = dict(batch_size=64, num_workers=WORKERS)
            loader = DL(train_set, **kwargs)  # TD102
            other = DL(train_set, num_workers=WORKERS)  # TD102
            for x, y in loader:
                model(x).sum().backward()
            """
        ),
        # Argparse default.
        Invalid(
            """
            import argparse
            import torch

            parser = argparse.ArgumentParser()
            parser.add_argument("--workers", "-j", type=int, default=0)

            def main(args):
                loader = torch.utils.data.DataLoader(  # TD102
                    train_ds,
                    batch_size=args.batch_size,
                    num_workers=args.workers,
                )
                for x, y in loader:
                    model(x).sum().backward()

            main(parser.parse_args())
            """
        ),
        Invalid("""
        from transformers import AutoModelForImageClassification, Trainer, TrainingArguments

        model = AutoModelForImageClassification.from_pretrained("google/vit-base-patch16-224-in21k")
        args = TrainingArguments(output_dir="vit-food", per_device_train_batch_size=32)  # TD102
        trainer = Trainer(model=model, args=args, train_dataset=train_ds, eval_dataset=val_ds)
        trainer.train()
        """),
        Invalid("""
        import pytorch_lightning as pl
        from torch.utils.data import DataLoader

        class CIFARData(pl.LightningDataModule):
            def train_dataloader(self):
                return DataLoader(self.train_set, batch_size=256, shuffle=True)  # TD102

            def val_dataloader(self):
                return DataLoader(self.val_set, batch_size=256)

        class Model(pl.LightningModule):
            def training_step(self, batch, batch_idx):
                return self.loss(self(batch[0]), batch[1])
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import iter_training_loaders
        from traindoctor.facts.frameworks.static import hf_training_args

        for loader in iter_training_loaders(ctx):
            if loader.in_memory or loader.iterable or loader.on_device:
                continue  # in memory, iterable, or already on the device: workers cannot help
            call = loader.call
            node = loader.arg(ctx, "num_workers")
            if node is UNKNOWN:
                continue
            if node is MISSING:
                message = (
                    "This training loader loads every batch in the main process (`num_workers` "
                    "defaults to 0); pass `num_workers` > 0 so worker processes prepare batches "
                    "while the model trains."
                )
            else:
                node = cast(ast.expr, node)  # neither MISSING nor UNKNOWN: a node
                value = ctx.value(node)
                if value is UNKNOWN or isinstance(value, bool) or value != 0:
                    continue
                message = (
                    f"`num_workers` is 0{_origin(node)}, so this training loader loads every batch "
                    "in the main process; use `num_workers` > 0 so worker processes prepare "
                    "batches while the model trains."
                )
            yield ctx.report(self, call, message, help=_HELP, related=loader.related)
        for args in hf_training_args(ctx):
            workers = args.value(ctx, "dataloader_num_workers")
            if workers != 0 or isinstance(workers, bool):
                continue
            given = isinstance(args.node(ctx, "dataloader_num_workers"), ast.AST)
            yield ctx.report(
                self,
                args.anchor(ctx, "dataloader_num_workers"),
                ("`dataloader_num_workers=0`" if given else "`dataloader_num_workers` defaults to 0")
                + ", so the Trainer loads and collates every training batch in the training process; "
                "pass `dataloader_num_workers` > 0 (with `dataloader_persistent_workers=True`).",
                help="Pass `dataloader_num_workers` (for example 4)",
            )


def _origin(node: ast.AST) -> str:
    """`` (the default of `--workers`)`` when the value comes from argparse, else nothing."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f" (the default of `--{node.attr.replace('_', '-')}`)"
    return ""


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class LoaderInMainProcessMonitor(Monitor):
    """Reports a `num_workers=0` loader only when the measured data wait is a real share of the
    loop's time *and* large per batch; cheap in-memory batches stay silent."""

    rule = LoaderInMainProcess

    _script: str | None = None

    def on_loader_created(self, info: LoaderInfo) -> None:
        if self._script is None:  # while the script runs, sys.argv[0] is its path
            from traindoctor.facts.data.runtime import script_name

            self._script = script_name()

    def on_run_end(self) -> None:
        from traindoctor.facts.data import runtime as ev

        min_share = float(self.threshold("min_wait_share", 0.2))
        min_ms = float(self.threshold("min_wait_ms", 5.0))
        min_batches = int(self.threshold("min_batches", 5))
        # A loader only iterated for evaluation is not the training input pipeline.
        for info in self.session.training_loaders():
            if info.num_workers != 0 or info.batches < min_batches:
                continue
            timing = ev.loader_timing(info)
            if timing.wait_share <= min_share or timing.wait_ms_per_batch <= min_ms:
                continue
            advice = ev.worker_advice(timing, info, self.session)
            workers = advice.workers
            pipe = ev.pipeline(timing, info, self.session)
            measured = (
                f"{timing.wait_ms_per_batch:.1f} ms to load and {timing.compute_ms_per_batch:.1f} ms "
                f"to train on a batch, {pipe.cores} usable core{'s' if pipe.cores != 1 else ''}"
            )
            if workers > 0:
                advice_text = (
                    f"pass `num_workers={workers}` so worker processes prepare batches while the "
                    f"model trains (predicted {advice.speedup_text()} from {measured})"
                )
            else:
                advice_text = (
                    "worker processes are not predicted to help here "
                    f"({measured}, loading needs the CPU): make loading cheaper"
                )
            settle = (
                f" `{ev.tune_command(self._script)}` measures it with your model in the loop ({advice.uncertain})."
                if advice.uncertain
                else ""
            )
            self.report(
                f"The loop waited for data {timing.wait_share:.0%} of the time "
                f"({timing.wait_ms_per_batch:.1f} ms per batch) because this DataLoader loads "
                f"batches in the main process; {advice_text}.{settle}",
                evidence={
                    "data_wait_share": round(timing.wait_share, 4),
                    "wait_ms_per_batch": round(timing.wait_ms_per_batch, 3),
                    "load_cpu_ms_per_batch": None if pipe.fetch_cpu_s is None else round(pipe.fetch_cpu_s * 1000.0, 3),
                    "compute_ms_per_batch": round(timing.compute_ms_per_batch, 3),
                    "batches": timing.batches,
                    "num_workers": 0,
                    "recommended_num_workers": workers,
                    "predicted_speedup": round(advice.speedup, 2),
                    "predicted_speedup_range": [round(x, 2) for x in advice.speedup_range],
                    "busy_cores_elsewhere": round(pipe.busy_elsewhere, 2),
                    "cores_per_rank": ev.cores_per_rank(self.session),
                    "torch_threads": pipe.threads,
                },
                step=self.session.step or None,
                help=(
                    "An IterableDataset must shard its stream per worker (torch.utils.data.get_worker_info())."
                    if info.iterable_dataset
                    else f"Pass `num_workers={workers}` (and `persistent_workers=True`); "
                    f"`{ev.tune_command(self._script)}` measures the best loader settings and torch threads."
                    if workers > 0
                    else f"`{ev.tune_command(self._script)}` measures the best loader settings and torch threads."
                ),
                **ev.site(info),
            )
