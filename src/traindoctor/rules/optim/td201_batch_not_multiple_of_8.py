"""TD201 batch-not-multiple-of-8: a CUDA training batch size that leaves Tensor Cores partly idle."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.args import MISSING, UNKNOWN

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from traindoctor.static.context import FileContext

#: Smaller batches are deliberate (memory-bound fine-tuning, per-image detection): not reported.
_MIN_BATCH = 8


class BatchNotMultipleOf8(Rule):
    code = "TD201"
    name = "batch-not-multiple-of-8"
    severity = Severity.INFO
    summary = (
        "The training batch size of a CUDA script is not a multiple of 8; use a multiple of 8 so "
        "fp16/bf16 matrix multiplies whose dimensions include the batch run fully on Tensor Cores."
    )
    gpu_only = True
    static = True
    runtime = True
    triggers = ("DataLoader",)
    project_aware = True
    fixable = "never"

    what_it_does = """
    Reports the `batch_size` of a training `DataLoader` (a literal, constant, literal `**kwargs`
    dict or argparse default) when it is 8 or more but not a multiple of 8, in a script that places
    work on a CUDA device and trains (it calls `backward()` or builds an optimizer). Batch sizes
    below 8 are left alone: they are usually forced by memory, and rounding them up would
    multiply the work. Evaluation loaders are skipped.

    At run time the same code is only reported under fp16/bf16 autocast on CUDA.
    """
    why_bad = """
    NVIDIA GPUs since Volta run fp16/bf16 matrix multiplies on Tensor Cores, which work on tiles
    whose dimensions are multiples of 8 (16 bytes of fp16). cuBLAS and cuDNN use them most
    efficiently when the GEMM dimensions M, N and K are multiples of 8; otherwise the last tile is
    padded (older libraries fell back to slower kernels altogether). For fully connected layers
    and transformers the batch (times the sequence length) is one of those dimensions, so a batch
    of 100 wastes part of the last tile in every layer. On A100 and newer, multiples of 64 (and the
    number of tiles relative to the number of SMs) matter even more.

    The reason is GEMM shapes, not memory pages (a popular explanation about "2 MB pages" is
    wrong), and the batch is only one of the dimensions: hidden sizes, channel counts and
    vocabulary sizes should be multiples of 8 as well. The effect is a few percent to tens of
    percent of the matrix-multiply time, which is why this is only `info`.
    """
    example = """
    loader = DataLoader(train_ds, batch_size=100, shuffle=True)
    """
    use_instead = """
    loader = DataLoader(train_ds, batch_size=96, shuffle=True)  # or 128
    """
    options = """
    Runtime (GPU-only): fires when the run uses CUDA with float16/bfloat16 autocast and the most
    common leading dimension of the 2-D inputs of `nn.Linear` layers in training forwards (the
    GEMM row count, i.e. the batch) is at least `TD201.multiple` and not a multiple of it.
    `TD201.multiple` (default 8).
    """
    references = (
        "https://docs.nvidia.com/deeplearning/performance/mixed-precision-training/index.html#tensor-core-shape",
        "https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/index.html#requirements-tc",
        "https://docs.nvidia.com/deeplearning/performance/dl-performance-fully-connected/index.html",
    )

    valid = (
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=128, shuffle=True)
            for x, y in loader:
                model(x.cuda()).sum().backward()
            """
        ),
        # CPU-only script: Tensor Cores are irrelevant.
        Valid(
            """
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=100, shuffle=True)
            for x, y in loader:
                model(x).sum().backward()
            """
        ),
        # Small deliberate batches and an evaluation loader.
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=2, shuffle=True)
            val_loader = DataLoader(val_ds, batch_size=100)
            for x, y in loader:
                model(x.cuda()).sum().backward()
            """
        ),
        # Inference-only script (no backward, no optimizer).
        Valid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(images, batch_size=50)
            model = model.cuda()
            for x in loader:
                preds.append(model(x.cuda()))
            """
        ),
    )
    invalid = (
        Invalid(
            """
            import torch
            from torch.utils.data import DataLoader

            loader = DataLoader(train_ds, batch_size=100, shuffle=True)  # TD201
            for x, y in loader:
                model(x.cuda()).sum().backward()
            """
        ),
        # Positional batch size through an alias.
        Invalid(
            """
            import torch
            import torch.utils.data as tud

            opt = torch.optim.AdamW(model.parameters())
            loader = tud.DataLoader(ds, 30, True)  # TD201
            model.to("cuda")
            """
        ),
        # Argparse default, used through a literal **kwargs dict.
        Invalid(
            """
            import argparse
            import torch
            from torch.utils.data import DataLoader

            parser = argparse.ArgumentParser()
            parser.add_argument("--batch-size", type=int, default=12)
            args = parser.parse_args()
            kw = {"batch_size": args.batch_size, "num_workers": 4}
            loader = DataLoader(train_ds, **kw)  # TD201
            for x, y in loader:
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(x.cuda()).sum()
                loss.backward()
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import iter_training_loaders

        if not ctx.targets_cuda:
            return
        from traindoctor.facts.amp.static import amp_facts

        half = amp_facts(ctx).file_uses_autocast
        for loader in iter_training_loaders(ctx):
            node = loader.arg(ctx, "batch_size")
            if node is MISSING or node is UNKNOWN:
                continue
            size = ctx.value(node)
            if not isinstance(size, int) or isinstance(size, bool) or size < _MIN_BATCH or size % 8 == 0:
                continue
            lower = size // 8 * 8
            origin = ""
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                origin = f" (the default of `--{node.attr.replace('_', '-')}`)"
            if half:
                why = "fp16/bf16 matrix multiplies that include the batch fill whole Tensor Core tiles"
            else:  # no autocast in the file: say nothing about half precision
                why = (
                    "matrix multiplies that include the batch fill whole Tensor Core tiles "
                    "(as TF32 and reduced-precision GEMMs use them)"
                )
            message = f"Batch size {size}{origin} is not a multiple of 8; use {lower} or {lower + 8} so {why}."
            yield ctx.report(
                self, loader.call, message, help=f"Use a batch size of {lower} or {lower + 8}", related=loader.related
            )


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class BatchNotMultipleOf8Monitor(Monitor):
    """Linear layers whose GEMM row count (the batch of a 2-D input) is not a multiple of 8,
    under float16/bfloat16 autocast on CUDA. GPU-only: silent on CPU runs."""

    rule = BatchNotMultipleOf8

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self.dtypes: set[str] = set()

    def on_autocast_enter(self, device_type: str, dtype: torch.dtype) -> None:
        if device_type == "cuda":
            name = str(dtype).replace("torch.", "")
            if name in ("float16", "bfloat16"):
                self.dtypes.add(name)

    def on_run_end(self) -> None:
        if not self.dtypes or not self.session.device.is_cuda or not self.session.step:
            return
        from traindoctor.facts.batching.runtime import leading_dims, most_common
        from traindoctor.runtime.probes.modules import module_stats

        multiple = int(self.threshold("multiple", 8))
        layers = module_stats(self.session).of_kind("linear")
        dims = leading_dims(layers, ndim=2)
        batch = most_common(dims)
        if batch is None or batch < multiple or batch % multiple == 0:
            return
        lower = batch - batch % multiple
        self.report(
            f"Linear layers multiply batches of {batch} rows under {'/'.join(sorted(self.dtypes))} "
            f"autocast; a batch size that is a multiple of {multiple} ({lower} or "
            f"{lower + multiple}) lets the GEMMs use Tensor Cores fully.",
            evidence={
                "batch": batch,
                "autocast_dtypes": sorted(self.dtypes),
                "linear_layers": len(layers),
                "multiple": multiple,
            },
            step=self.session.step,
        )
