"""TD306 fp16-on-bf16-gpu: float16 autocast on a bfloat16-capable GPU."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class Fp16OnBf16Gpu(Rule):
    code = "TD306"
    name = "fp16-on-bf16-gpu"
    severity = Severity.INFO
    summary = (
        "float16 autocast on a GPU that supports bfloat16 (compute capability >= 8.0); "
        "autocast to bfloat16 and drop the GradScaler."
    )
    gpu_only = True
    static = False
    runtime = True

    what_it_does = """
    Reports, at run time, float16 autocast regions on a CUDA device of compute capability 8.0
    or newer (A100, H100, RTX 30xx/40xx and later), which support bfloat16 natively.
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


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor  # noqa: E402


class Fp16OnBf16GpuMonitor(Monitor):
    """float16 autocast on a CUDA device of compute capability >= 8.0 (bfloat16 capable)."""

    rule = Fp16OnBf16Gpu

    def __init__(self, session: object) -> None:
        super().__init__(session)
        self.regions = 0
        self.site: object = None

    def on_autocast_enter(self, device_type: str, dtype: object) -> None:
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
            **site_kwargs(self.site),  # type: ignore[arg-type]
        )
