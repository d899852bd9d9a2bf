"""TD804 channels-last-off: a CNN under autocast on Tensor Cores keeps the NCHW memory format."""

from __future__ import annotations

from typing import TYPE_CHECKING

from traindoctor.finding import Severity
from traindoctor.rules.base import Rule

if TYPE_CHECKING:  # pragma: no cover
    pass


class ChannelsLastOff(Rule):
    code = "TD804"
    name = "channels-last-off"
    severity = Severity.INFO
    summary = (
        "A convolutional model trains under autocast on a GPU with Tensor Cores in the contiguous "
        "(NCHW) memory format while convolutions dominate GPU time; convert it with "
        "`model.to(memory_format=torch.channels_last)`."
    )
    gpu_only = True
    static = False
    runtime = True
    fixable = "never"

    what_it_does = """
    Reports, at run time on a CUDA device with Tensor Cores (compute capability 7.0 or newer), a
    run that trains under float16 or bfloat16 autocast whose `Conv2d` weights are all in the
    contiguous NCHW format (none channels-last; 1x1 kernels, whose two formats coincide, are not
    judged) while convolutions dominate the GPU's step time. The convolutions' share is
    estimated as their FLOPs' share of the Linear and convolution FLOPs of a training step (each
    layer at its most common training input shape), times the share of the GPU's step time spent
    computing (CUDA events); it fires at half or more.
    """
    why_bad = """
    Tensor Core convolutions in cuDNN work on NHWC data. With NCHW tensors every convolution
    under autocast either runs a slower NCHW kernel or pays transposes before and after it;
    channels-last tensors feed the fast kernels directly. NVIDIA and PyTorch report 10-30%
    faster training for ResNet-style models from the one-line change (inputs follow the model's
    format when the first layer is a convolution, or convert them too).
    """
    example = """
    model = torchvision.models.resnet50().cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(images), labels)
    """
    use_instead = """
    model = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = criterion(model(images.to(memory_format=torch.channels_last)), labels)
    """
    options = """
    GPU-only, runtime only. Fires when the estimated convolution share is at least
    `TD804.min_share` (default 0.5) of the GPU's step time.
    """
    references = (
        "https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html",
        "https://docs.nvidia.com/deeplearning/performance/dl-performance-convolutional/index.html#tensor-layout",
    )


# ---------------------------------------------------------------- runtime half
from traindoctor.facts.gpu.runtime import CudaAutocastMonitor  # noqa: E402


class ChannelsLastOffMonitor(CudaAutocastMonitor):
    """NCHW convolutions dominating GPU time under CUDA autocast on Tensor Cores (GPU-only)."""

    rule = ChannelsLastOff

    def on_run_end(self) -> None:
        device = self.session.device
        capability = tuple(device.capability or ())
        gpu = self.session.gpu_profile
        if not self.autocast_regions or not device.is_cuda or not capability or capability < (7, 0):
            return
        if gpu is None or gpu.span <= 0 or not gpu.steps:
            return
        from traindoctor.facts.gpu.runtime import training_gemms

        gemms = training_gemms(self.session, float32_only=False)
        total = gemms.conv_flops + gemms.linear_flops
        if not gemms.conv2d or gemms.channels_last or total <= 0:
            return
        compute_share = gpu.share(gpu.busy["forward"] + gpu.busy["backward"] + gpu.busy["other"])
        share = gemms.conv_flops / total * compute_share
        if share < float(self.threshold("min_share", 0.5)):
            return
        self.report(
            f"Convolutions took about {share:.0%} of the GPU's step time under autocast on "
            f"{device.name} with all {gemms.conv2d} Conv2d weights in the NCHW memory format; convert "
            "the model (and its inputs) with `.to(memory_format=torch.channels_last)` so cuDNN runs "
            "its NHWC Tensor Core kernels.",
            evidence={
                "conv_share": round(share, 4),
                "conv_flop_share": round(gemms.conv_flops / total, 4),
                "compute_share": round(compute_share, 4),
                "conv2d_layers": gemms.conv2d,
                "conv_gflop_per_step": round(gemms.conv_flops / 1e9, 4),
                "autocast_regions": self.autocast_regions,
                "capability": f"{capability[0]}.{capability[1]}",
                "device": device.name,
            },
            step=self.session.step or None,
            help="Use `model.to(memory_format=torch.channels_last)`",
        )
