"""Peak dense FLOP/s of common GPUs, by device name and precision: the denominator of MFU.

Only devices whose vendor publishes the numbers are here; a device not in the table gets no peak,
so the report prints no MFU rather than a guess. Values are *dense* (no 2:4 sparsity) tensor-core
peaks in TFLOP/s, with FP32 accumulation for the consumer cards (what PyTorch's GEMMs use), at
the boost clock. Sources:

* H100 SXM / PCIe / NVL, H200 SXM / NVL: NVIDIA H100 and H200 Tensor Core GPU datasheets (the
  sparse figures halved);
* A100 (SXM and PCIe, 40 and 80 GB alike): NVIDIA A100 Tensor Core GPU datasheet;
* L40S, L4, A10: their NVIDIA datasheets (the sparse figures halved);
* V100 (SXM2, PCIe, V100S), T4: NVIDIA V100 and T4 datasheets (FP16 tensor core; no BF16 or TF32
  hardware: BF16 on them is emulated and gets no peak);
* RTX 4090: NVIDIA Ada Lovelace architecture whitepaper, appendix table (FP16/BF16 tensor with FP32
  accumulate 165.2, TF32 82.6, FP32 82.6);
* RTX 3090: NVIDIA Ampere GA102 whitepaper, table of GeForce RTX 3090 specifications (FP16/BF16
  tensor with FP32 accumulate 71, TF32 35.6, FP32 35.6).

AWS's A10G is left out: NVIDIA publishes no datasheet for it, and the figures in circulation
disagree by 2x.
"""

from __future__ import annotations

import re

#: Precisions a peak is given for. ``tf32`` is an FP32 GEMM or convolution that TF32 is allowed for.
PRECISIONS = ("bf16", "fp16", "tf32", "fp32")

#: (device label, name pattern (lower case, searched), peak TFLOP/s by precision). First match wins,
#: so the more specific names come first.
_TABLE: tuple[tuple[str, str, dict[str, float]], ...] = (
    ("H200 NVL", r"\bh200\b.*\bnvl\b", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("H200 SXM", r"\bh200\b", {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}),
    ("H100 NVL", r"\bh100\b.*\bnvl\b", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("H100 PCIe", r"\bh100\b.*\bpcie\b", {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.0}),
    ("H100 SXM", r"\bh100\b.*\b(sxm|hbm3)", {"bf16": 989.5, "fp16": 989.5, "tf32": 494.5, "fp32": 67.0}),
    ("A100", r"\ba100\b", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("L40S", r"\bl40s\b", {"bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp32": 91.6}),
    ("L4", r"\bl4\b", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("A10", r"\ba10\b", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    ("V100S", r"\bv100s\b", {"fp16": 130.0, "fp32": 16.4}),
    ("V100 SXM2", r"\bv100\b.*\bsxm2?\b", {"fp16": 125.0, "fp32": 15.7}),
    ("V100 PCIe", r"\bv100\b.*\bpcie\b", {"fp16": 112.0, "fp32": 14.0}),
    ("T4", r"\bt4\b", {"fp16": 65.0, "fp32": 8.1}),
    ("RTX 4090", r"\brtx 4090\b", {"bf16": 165.2, "fp16": 165.2, "tf32": 82.6, "fp32": 82.6}),
    ("RTX 3090", r"\brtx 3090\b(?! ti)", {"bf16": 71.0, "fp16": 71.0, "tf32": 35.6, "fp32": 35.6}),
)


def device_peaks(name: str | None) -> tuple[str, dict[str, float]] | None:
    """(the table's label, peak FLOP/s by precision) of the device called ``name``
    (``torch.cuda.get_device_name()``), or None when it is not in the table."""
    if not name:
        return None
    lower = name.lower()
    for label, pattern, tflops in _TABLE:
        if re.search(pattern, lower):
            return label, {k: v * 1e12 for k, v in tflops.items()}
    return None


def peak_for(peaks: dict[str, float], precision: str) -> float | None:
    """The peak for one precision; an FP32 operation on a device without TF32 units runs at the
    FP32 peak. None when the device has no such units (BF16 on a V100 or T4, FP64, integers)."""
    if precision == "tf32" and "tf32" not in peaks:
        precision = "fp32"
    return peaks.get(precision)
