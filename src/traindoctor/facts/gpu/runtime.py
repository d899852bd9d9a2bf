"""Runtime facts about GPU efficiency, read from the device-time profile of a CUDA run.

:func:`step_sync_sites` (TD801): the synchronisation sites (the user's file and line of an
``.item()``, ``.cpu()``, ``.tolist()``, ``print(tensor)`` or tensor-valued ``if``) that ran at
(almost) every steady step, with the GPU idle time charged to each
(:mod:`traindoctor.runtime.gpu_profile` charges the idle that follows a sync to it, up to the time
the host waited there).

:func:`training_gemms` (TD309, TD804): the FLOPs per training step of the Linear and
convolution layers that trained on the device, from the module probe's per-layer input shapes
(with :func:`fp32_peak_tflops`, a lower bound on the GPU time the float32 ones took), and the
memory format of the convolution weights. :func:`optimizer_kernels` (TD802): how a torch
optimizer steps on CUDA.

Imports torch lazily: call these from monitors only.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.events import Monitor
from traindoctor.runtime.live import fields_repr

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from traindoctor.runtime.gpu_profile import GpuProfile


class CudaAutocastMonitor(Monitor):
    """A monitor that counts the CUDA fp16/bf16 autocast regions the run entered (TD309 stays
    silent under them, TD804 judges only under them)."""

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self.autocast_regions = 0

    def on_autocast_enter(self, device_type: str, dtype: torch.dtype) -> None:
        import torch

        if device_type == "cuda" and dtype in (torch.float16, torch.bfloat16):
            self.autocast_regions += 1


class SyncSiteUse:
    """One synchronisation site over the steady steps (means per step)."""

    __slots__ = ("idle_s", "site", "step_share", "syncs_per_step")

    #: The user's ``(filename, row)`` (a :class:`~traindoctor.runtime.live.Site`), or None.
    site: Any
    idle_s: float
    syncs_per_step: float
    #: Share of the steady steps that synchronised here at least once.
    step_share: float

    def __init__(self, site: Any, idle_s: float, syncs_per_step: float, step_share: float) -> None:
        self.site = site
        self.idle_s = idle_s
        self.syncs_per_step = syncs_per_step
        self.step_share = step_share

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)


def step_sync_sites(gpu: GpuProfile) -> list[SyncSiteUse]:
    """Every synchronisation site of the steady steps, the most idle first."""
    steps = gpu.steps
    if not steps:
        return []
    out = []
    for site, per_step in gpu.sync_counts.items():
        present = sum(1 for s in steps if s.sync_counts.get(site))
        out.append(SyncSiteUse(site, gpu.sync_sites.get(site, 0.0), per_step, present / len(steps)))
    out.sort(key=lambda u: (-u.idle_s, -u.syncs_per_step))
    return out


def site_text(site: Any) -> str:
    """``file:line`` of a site (``"an unknown line"`` for None)."""
    if not site:
        return "an unknown line"
    return f"{site[0]}:{site[1]}"


# ---------------------------------------------------------------- float32 GEMMs (TD309)
#: Dense float32 throughput without Tensor Cores (TFLOP/s), by device name (first match wins).
#: A lower bound on the time float32 GEMMs took: real kernels reach less than the peak.
FP32_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H100 PCIe", 51.0),
    ("H100", 67.0),
    ("H200", 67.0),
    ("GH200", 67.0),
    ("B200", 80.0),
    ("A100", 19.5),
    ("A800", 19.5),
    ("A30", 10.3),
    ("A40", 37.4),
    ("A6000", 38.7),
    ("A10", 31.2),
    ("L40S", 91.6),
    ("L40", 90.5),
    ("L4", 30.3),
    ("RTX 3090", 35.6),
    ("RTX 4090", 82.6),
)
#: Assumed for a device not in the table: above every listed GPU's, so the time stays a lower bound.
FALLBACK_FP32_TFLOPS = 105.0


def fp32_peak_tflops(name: str) -> tuple[float, bool]:
    """(dense float32 TFLOP/s of the device named ``name``, whether the name was known)."""
    for key, tflops in FP32_PEAK_TFLOPS:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![0-9])", name):
            return tflops, True
    return FALLBACK_FP32_TFLOPS, False


def _conv_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    return max((size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1, 0)


def layer_flops(module: Any, kind: str, shape: tuple[int, ...]) -> float:
    """Multiply-add FLOPs (x2) of one forward of a Linear or convolution layer on ``shape``."""
    weight = getattr(module, "weight", None)
    if weight is None or not shape:
        return 0.0
    if kind == "linear":
        rows = 1
        for d in shape[:-1]:
            rows *= int(d)
        return 2.0 * rows * int(module.in_features) * int(module.out_features)
    dims = len(module.kernel_size)
    if len(shape) < dims + 1:
        return 0.0
    batch = 1
    for d in shape[: len(shape) - dims - 1]:
        batch *= int(d)
    spatial = [int(d) for d in shape[-dims:]]
    # weight: (out, in / groups, *kernel), or (in, out / groups, *kernel) when transposed
    per_position = 2.0 * int(weight.shape[1]) * math.prod(int(k) for k in module.kernel_size)
    if getattr(module, "transposed", False):  # every input position scatters into the output
        return per_position * math.prod(spatial) * int(module.in_channels) * batch
    padding = module.padding
    positions = 1
    for i, size in enumerate(spatial):
        if isinstance(padding, str):  # "same" keeps the size (stride 1), "valid" pads nothing
            out = size if padding == "same" else _conv_out(size, module.kernel_size[i], 1, 0, module.dilation[i])
        else:
            out = _conv_out(size, module.kernel_size[i], module.stride[i], padding[i], module.dilation[i])
        positions *= out
    return per_position * positions * int(module.out_channels) * batch


class TrainingGemms:
    """Linear and convolution work of one training step (forward and backward), and the
    convolution weights that are 4-D (``Conv2d``) and in the channels-last memory format."""

    __slots__ = ("channels_last", "conv2d", "conv_flops", "layers", "linear_flops")

    linear_flops: float
    conv_flops: float
    layers: int
    conv2d: int
    channels_last: int

    def __init__(self) -> None:
        self.linear_flops = self.conv_flops = 0.0
        self.layers = self.conv2d = self.channels_last = 0

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)


def training_gemms(session: Any, float32_only: bool = True) -> TrainingGemms:
    """FLOPs per training step of the float32 (with ``float32_only=False``: all) Linear and
    convolution layers that trained on the device: each layer once per step at its most common
    training input shape, its backward twice its forward. A lower bound where a layer runs more
    than once per step."""
    import torch

    from traindoctor.runtime.probes.modules import module_stats

    out = TrainingGemms()
    for rec in module_stats(session).of_kind("linear", "conv"):
        module = rec.module()
        weight = getattr(module, "weight", None) if module is not None else None
        if weight is None or (float32_only and weight.dtype is not torch.float32):
            continue
        shapes = {sig[0]: n for sig, n in rec.counts.items() if sig[0] and sig[1] == "cuda" and sig[2] and sig[3]}
        if not shapes:
            continue
        shape = max(shapes.items(), key=lambda kv: kv[1])[0]
        flops = 3.0 * layer_flops(module, rec.kind, shape)
        if flops <= 0:
            continue
        out.layers += 1
        if rec.kind == "linear":
            out.linear_flops += flops
            continue
        out.conv_flops += flops
        if weight.dim() == 4:
            last = weight.is_contiguous(memory_format=torch.channels_last)
            if last and weight.is_contiguous():
                continue  # 1x1 kernels or one input channel: both formats at once, says nothing
            out.conv2d += 1
            out.channels_last += int(last)
    return out


# ---------------------------------------------------------------- optimizer kernels (TD802)
#: Optimizers whose step has a fused CUDA kernel (``fused=True``), by class name.
FUSED_OPTIMIZERS = frozenset({"Adam", "AdamW"})


def optimizer_kernels(optimizer: Any) -> str | None:
    """How ``optimizer`` steps on CUDA: ``"for-loop"`` (``foreach=False``: kernels per parameter),
    ``"foreach"`` (an Adam/AdamW that could be ``fused=True``), or None (fused, a multi-tensor
    optimizer without a fused kernel, a ``differentiable`` one, or not a torch optimizer)."""
    groups = getattr(optimizer, "param_groups", None) or []
    if not groups or not type(optimizer).__module__.startswith("torch.optim"):
        return None
    if any(g.get("differentiable") or g.get("fused") for g in groups):
        return None
    if any(g.get("foreach") is False for g in groups):
        return "for-loop"
    if type(optimizer).__name__ in FUSED_OPTIMIZERS:
        return "foreach"
    return None


def tf32_precisions() -> tuple[str, str]:
    """(matmuls, cuDNN convolutions): ``"ieee"`` (TF32 off), ``"tf32"`` or ``"unknown"``.

    PyTorch's newer per-backend settings (``torch.backends.cuda.matmul.fp32_precision``,
    ``torch.backends.cudnn.conv.fp32_precision``) win when set; otherwise the legacy ones
    (``torch.get_float32_matmul_precision()``, ``torch.backends.cudnn.allow_tf32``), whose getters
    raise when a script mixed both APIs (then ``"unknown"``: nothing is claimed)."""
    import torch

    def new_setting(owner: Any) -> str | None:
        value = getattr(owner, "fp32_precision", None) if owner is not None else None
        return value if value in ("ieee", "tf32") else None

    matmul = new_setting(torch.backends.cuda.matmul)
    if matmul is None:
        try:
            matmul = "ieee" if torch.get_float32_matmul_precision() == "highest" else "tf32"
        except RuntimeError:
            matmul = "unknown"
    conv = new_setting(getattr(torch.backends.cudnn, "conv", None))
    if conv is None:
        try:
            conv = "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"
        except RuntimeError:
            conv = "unknown"
    return matmul, conv
