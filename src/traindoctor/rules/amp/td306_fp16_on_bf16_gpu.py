"""TD306 fp16-on-bf16-gpu: float16 autocast on a bfloat16-capable GPU."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from traindoctor.runtime.live import Site
    from traindoctor.static.context import FileContext


class Fp16OnBf16Gpu(Rule):
    code = "TD306"
    name = "fp16-on-bf16-gpu"
    severity = Severity.INFO
    summary = (
        "float16 autocast on a GPU that supports bfloat16 (compute capability >= 8.0); "
        "autocast to bfloat16 and drop the GradScaler."
    )
    gpu_only = True
    static = True
    runtime = True
    triggers = ("fp16", "16")
    fixable = "never"

    what_it_does = """
    Reports, at run time, float16 autocast regions on a CUDA device of compute capability 8.0
    or newer (A100, H100, RTX 30xx/40xx and later), which support bfloat16 natively.

    Statically, where a training framework is told to train in float16 mixed precision by one
    switch, as a hint: Hugging Face `TrainingArguments(fp16=True)` (unless `use_cpu=True`),
    Lightning `Trainer(precision="16-mixed")` / `Fabric(precision="16-mixed")` (or the legacy
    `16`), and `Accelerator(mixed_precision="fp16")`. The checker cannot see the GPU, so this
    says "on Ampere or newer, prefer bf16"; a switch whose value is computed (e.g.
    `fp16=not torch.cuda.is_bf16_supported()`) is left alone. Hand-written
    `torch.autocast(dtype=torch.float16)` is judged at run time only.
    """
    why_bad = """
    float16 has a 5-bit exponent: gradients below about 6e-8 flush to zero and activations above
    65504 overflow, so float16 training needs a GradScaler and still hits occasional overflow
    steps that are skipped. bfloat16 keeps float32's 8-bit exponent (same range, fewer mantissa
    bits), needs no loss scaling and runs at the same Tensor Core speed on these GPUs. float16
    remains the right choice on older GPUs (V100, T4) that lack fast bfloat16.
    """
    example = """
    import torch

    scaler = torch.amp.GradScaler("cuda")
    with torch.autocast("cuda", dtype=torch.float16):  # on an A100
        loss = model(x).loss
    scaler.scale(loss).backward()
    """
    use_instead = """
    import torch

    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).loss
    loss.backward()

# or let traindoctor.recipes pick the dtype for this GPU (bf16 where supported, else fp16
# with an enabled scaler):
from traindoctor.recipes import autocast_settings
amp = autocast_settings("cuda")
with amp.autocast():
    loss = criterion(model(x), y)
amp.scaler.scale(loss).backward()
amp.scaler.step(optimizer)
amp.scaler.update()
    """
    references = (
        "https://pytorch.org/docs/stable/amp.html",
        "https://cloud.google.com/tpu/docs/bfloat16",
    )
    options = """
    No thresholds. GPU-only: an enabled float16 autocast region ran on a CUDA device of compute
    capability 8.0 or newer.
    """

    valid = (
        Valid("""
        import torch
        from transformers import Trainer, TrainingArguments

        # the switch follows the hardware
        args = TrainingArguments(
            output_dir="out",
            bf16=torch.cuda.is_bf16_supported(),
            fp16=not torch.cuda.is_bf16_supported(),
        )
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """),
        Valid("""
        import lightning as L

        trainer = L.Trainer(accelerator="gpu", devices=1, precision="bf16-mixed")
        trainer.fit(model, datamodule=dm)
        """),
        Valid("""
        from transformers import Trainer, TrainingArguments

        args = TrainingArguments(output_dir="out", fp16=True, use_cpu=True)
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """),
    )
    invalid = (
        Invalid("""
        from transformers import Trainer, TrainingArguments

        args = TrainingArguments(
            output_dir="out",
            per_device_train_batch_size=16,
            fp16=True,  # TD306
            dataloader_num_workers=4,
            dataloader_persistent_workers=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=train_ds)
        trainer.train()
        """),
        Invalid("""
        import lightning as L
        from accelerate import Accelerator

        trainer = L.Trainer(accelerator="gpu", precision="16-mixed")  # TD306
        accelerator = Accelerator(mixed_precision="fp16")  # TD306
        """),
        Invalid("""
        from lightning.fabric import Fabric

        fabric = Fabric(accelerator="cuda", devices=4, precision=16)  # TD306
        fabric.launch()
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.frameworks.static import fp16_choices

        for choice in fp16_choices(ctx):
            yield ctx.report(
                self,
                choice.node,
                f"`{choice.framework}({choice.setting})` trains in float16, which needs loss "
                f"scaling; on Ampere or newer GPUs (A100, H100, RTX 30xx+) use `{choice.instead}`.",
                help=f"Use `{choice.instead}` on bfloat16-capable GPUs",
            )


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class Fp16OnBf16GpuMonitor(Monitor):
    """float16 autocast on a CUDA device of compute capability >= 8.0 (bfloat16 capable)."""

    rule = Fp16OnBf16Gpu

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self.regions = 0
        self.site: Site | None = None

    def on_autocast_enter(self, device_type: str, dtype: torch.dtype) -> None:
        import torch

        if device_type == "cuda" and dtype is torch.float16:
            self.regions += 1
            if self.site is None:
                from traindoctor.runtime.live import user_site

                self.site = user_site()

    def on_run_end(self) -> None:
        device = self.session.device
        capability = tuple(device.capability or ())
        if not self.regions or not device.is_cuda or not capability or capability < (8, 0):
            return
        from traindoctor.runtime.live import site_kwargs

        self.report(
            f"float16 autocast on {device.name} (compute capability "
            f"{capability[0]}.{capability[1]}), which supports bfloat16; use "
            "`torch.autocast('cuda', dtype=torch.bfloat16)` and drop the GradScaler.",
            evidence={
                "device": device.name,
                "capability": f"{capability[0]}.{capability[1]}",
                "bf16_supported": bool(device.bf16_supported),
                "fp16_autocast_regions": self.regions,
            },
            **site_kwargs(self.site),
        )
