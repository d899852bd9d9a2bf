"""TD309 tf32-off: float32 matmuls and convolutions run without TF32 on a GPU that has it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from traindoctor.finding import Severity
from traindoctor.rules.base import Rule

if TYPE_CHECKING:  # pragma: no cover
    pass


class Tf32Off(Rule):
    code = "TD309"
    name = "tf32-off"
    severity = Severity.INFO
    summary = (
        "float32 matmuls or convolutions take a large share of GPU time on a GPU with TF32 "
        "(compute capability >= 8.0) while TF32 is off; call "
        "`torch.set_float32_matmul_precision('high')` or train under autocast."
    )
    gpu_only = True
    static = False
    runtime = True
    fixable = "never"

    what_it_does = """
    Reports, at run time on a CUDA device of compute capability 8.0 or newer (Ampere, Hopper,
    Blackwell, ...), a training run whose float32 `nn.Linear` and convolution layers take a large
    share of the GPU's step time while TF32 is off for them: matmuls when
    `torch.get_float32_matmul_precision()` is `"highest"` (PyTorch's default;
    `torch.backends.cuda.matmul.allow_tf32 = False`), convolutions when
    `torch.backends.cudnn.allow_tf32` is `False` (PyTorch's default is `True`). PyTorch's newer
    per-backend settings (`torch.backends.cuda.matmul.fp32_precision = "ieee"`,
    `torch.backends.cudnn.conv.fp32_precision`) count when set; a script that mixed the old and
    new settings (PyTorch then refuses to say) is left alone.

    The share is a lower bound: the layers' FLOPs per training step (each layer once per step at
    its most common training input shape, backward twice the forward) at the device's dense
    float32 peak, over the GPU time of a step measured with CUDA events. Layers whose weights are
    not float32, and runs that train under CUDA autocast (float16 or bfloat16: Linear and
    convolutions then run in half precision, so float32 GEMMs are a small share) are not counted.
    """
    why_bad = """
    On Ampere and newer GPUs, TF32 runs float32 matmuls and convolutions on Tensor Cores with a
    10-bit mantissa, typically several times faster than full float32 (an A100: 156 TFLOP/s
    against 19.5), and deep-learning training is insensitive to the lost precision in nearly all
    cases. PyTorch leaves TF32 off for matmuls by default since 1.12 (for numerical code that
    needs full float32), so a float32 training loop that never opts in pays full price for every
    `nn.Linear`.
    """
    example = """
    model = Transformer().cuda()           # float32 weights, no autocast
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
    """
    use_instead = """
    torch.set_float32_matmul_precision("high")   # TF32 matmuls (convolutions use TF32 by default)
    model = Transformer().cuda()
    for x, y in loader:
        loss = criterion(model(x.cuda()), y.cuda())
        loss.backward()
        optimizer.step()
    """
    options = """
    GPU-only, runtime only. Fires when the float32 layers' estimated GPU time is at least
    `TD309.min_share` (default 0.2) of the GPU's step time (means over the steady timed steps).
    The peak assumed for a device not in the table (105 TFLOP/s) is above every known one, so
    the estimate stays a lower bound.
    """
    references = (
        "https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
        "https://pytorch.org/docs/stable/generated/torch.set_float32_matmul_precision.html",
    )


# ---------------------------------------------------------------- runtime half
from traindoctor.facts.gpu.runtime import CudaAutocastMonitor  # noqa: E402


class Tf32OffMonitor(CudaAutocastMonitor):
    """float32 Linear/conv GPU time with TF32 off on a capability >= 8.0 device (GPU-only)."""

    rule = Tf32Off

    def on_run_end(self) -> None:
        device = self.session.device
        capability = tuple(device.capability or ())
        gpu = self.session.gpu_profile
        if not device.is_cuda or not capability or capability < (8, 0) or self.autocast_regions:
            return
        if gpu is None or gpu.span <= 0 or not gpu.steps:
            return
        from traindoctor.facts.gpu.runtime import fp32_peak_tflops, tf32_precisions, training_gemms

        matmul, conv = tf32_precisions()
        matmul_off, conv_off = matmul == "ieee", conv == "ieee"
        if not (matmul_off or conv_off):
            return
        gemms = training_gemms(self.session)
        flops = (gemms.linear_flops if matmul_off else 0.0) + (gemms.conv_flops if conv_off else 0.0)
        tflops, known = fp32_peak_tflops(device.name or "")
        compute = gpu.busy["forward"] + gpu.busy["backward"] + gpu.busy["other"]
        seconds = min(flops / (tflops * 1e12), compute)
        share = gpu.share(seconds)
        if share < float(self.threshold("min_share", 0.2)):
            return
        what = " and ".join(
            w
            for w, on in (
                ("matmuls", matmul_off and gemms.linear_flops),
                ("convolutions", conv_off and gemms.conv_flops),
            )
            if on
        )
        fixes = []
        if matmul_off and gemms.linear_flops:
            fixes.append("`torch.set_float32_matmul_precision('high')`")
        if conv_off and gemms.conv_flops:
            fixes.append("`torch.backends.cudnn.allow_tf32 = True`")
        self.report(
            f"float32 {what} took at least {share:.0%} of the GPU's step time on {device.name} "
            f"(compute capability {capability[0]}.{capability[1]}) with TF32 off; set "
            f"{' and '.join(fixes)} (or train under bfloat16 autocast) to run them on Tensor Cores.",
            evidence={
                "fp32_gemm_share": round(share, 4),
                "fp32_gemm_ms": round(seconds * 1000.0, 4),
                "gpu_step_ms": round(gpu.span * 1000.0, 4),
                "gflop_per_step": round(flops / 1e9, 3),
                "fp32_peak_tflops": tflops,
                "peak_known": known,
                "layers": gemms.layers,
                "matmul_fp32_precision": matmul,
                "conv_fp32_precision": conv,
                "capability": f"{capability[0]}.{capability[1]}",
                "device": device.name,
            },
            step=self.session.step or None,
            help="Call `torch.set_float32_matmul_precision('high')`",
        )
