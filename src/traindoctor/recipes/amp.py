"""Mixed-precision recipe: one autocast + GradScaler setup that is right on every device.

This is what TD301, TD305, TD306 and TD308 point at. The decision table:

==========================================  =========  =======  ==================
device                                      dtype      enabled  GradScaler
==========================================  =========  =======  ==================
CUDA, compute capability >= 8.0 (Ampere+)   bfloat16   yes      disabled
CUDA, older GPU                             float16    yes      enabled
CPU, MPS, anything else                     float32    no       disabled
==========================================  =========  =======  ==================

bfloat16 has float32's exponent range, so it needs no loss scaling (a scaler would only add work,
TD305); float16 does (TD301). CPU autocast does support bfloat16, but on CPUs without bf16 matrix
units (AMX) it usually makes training slower, not faster, so the CPU default is plain float32;
ask for it explicitly with ``bf16_supported=True`` on a CPU you know has AMX. MPS stays in float32
too (fp16 autocast without a tested GradScaler path is not a safe default).
"""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["AmpSettings", "autocast_settings"]

#: Minimum CUDA compute capability with native bfloat16 tensor-core math (Ampere).
BF16_MIN_CAPABILITY = (8, 0)


@dataclass(frozen=True)
class AmpSettings:
    """What to autocast to on one device, and the matching GradScaler.

    ``scaler`` is always a real ``torch.amp.GradScaler``; when loss scaling is not needed it is
    constructed with ``enabled=False``, so ``scaler.scale(loss)`` returns ``loss`` unchanged and
    ``scaler.step(optimizer)`` just calls ``optimizer.step()``: one loop serves every device.
    ``loss_scaling`` says whether a scaler is needed (float16); it is what was decided even where
    PyTorch itself then disables the scaler (a CUDA decision on a machine without CUDA).
    """

    dtype: torch.dtype
    device_type: str
    enabled: bool
    scaler: Any  # torch.amp.GradScaler
    loss_scaling: bool = False

    def autocast(self) -> ContextManager[Any]:
        """``torch.autocast`` for this device and dtype (a no-op context when disabled)."""
        if not self.enabled:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)


def device_of(device: Any, recipe: str = "autocast_settings") -> torch.device:
    """``device`` as a ``torch.device`` (None: CUDA if available, else CPU); a value that names no
    device is a ``ValueError`` that starts with the ``recipe`` it was given to."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{recipe}: not a device: {device!r} ({exc})") from None


def autocast_settings(
    device: Any = None,
    *,
    cuda_capability: tuple[int, int] | None = None,
    bf16_supported: bool | None = None,
) -> AmpSettings:
    """The autocast dtype and GradScaler for ``device`` (default: CUDA if available, else CPU).

    See the module docstring for the table. ``cuda_capability`` overrides the queried
    ``torch.cuda.get_device_capability`` and ``bf16_supported`` overrides the whole bf16 decision
    (both for tests and for users who know better); ``torch.cuda.is_bf16_supported()`` is not
    used because it also says yes to emulated, slow bf16 on older GPUs.

    Example::

        amp = autocast_settings(device)
        with amp.autocast():
            loss = criterion(model(x), y)
        amp.scaler.scale(loss).backward()
        amp.scaler.step(optimizer)
        amp.scaler.update()
    """
    dev = device_of(device)
    kind = dev.type
    if kind == "cuda":
        if bf16_supported is None:
            if cuda_capability is None:
                if not torch.cuda.is_available():
                    raise ValueError(
                        f"autocast_settings({str(dev)!r}): CUDA is not available here; pass the device the "
                        "run really uses (or cuda_capability= to describe a GPU)"
                    )
                index = dev.index if dev.index is not None else torch.cuda.current_device()
                cuda_capability = torch.cuda.get_device_capability(index)
            bf16_supported = tuple(cuda_capability) >= BF16_MIN_CAPABILITY
        dtype = torch.bfloat16 if bf16_supported else torch.float16
        scaling = not bf16_supported
        return AmpSettings(dtype, kind, True, torch.amp.GradScaler(kind, enabled=scaling), scaling)
    if kind == "cpu" and bf16_supported:
        return AmpSettings(torch.bfloat16, kind, True, torch.amp.GradScaler(kind, enabled=False), False)
    return AmpSettings(torch.float32, kind, False, torch.amp.GradScaler(_scaler_device(kind), enabled=False), False)


def _scaler_device(kind: str) -> str:
    # GradScaler accepts the device types PyTorch has scaling kernels for; a disabled scaler
    # never touches the device, so fall back to "cpu" for anything unusual.
    return kind if kind in ("cuda", "cpu", "xpu", "mps") else "cpu"
