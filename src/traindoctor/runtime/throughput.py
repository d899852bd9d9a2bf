"""Throughput in the units users track: samples/s, tokens/s, and model FLOP utilisation (MFU).

* **Samples/s** are the samples the DataLoader delivered in the steady steps over their wall time
  (the batch size the loader probe sees; :func:`traindoctor.runtime.steps.batch_samples`).
* **Tokens/s** are counted when a batch holds token ids: an integer tensor of rank 2 (``input_ids``
  in a dict batch, else the first such tensor) and the model has an ``nn.Embedding`` to feed them
  to. A batch's tokens are the ids' ``numel()``; padding is left out only when the batch carries
  its ``attention_mask`` (on the host: counting it on the device would synchronise), as Hugging
  Face batches do.
* **MFU** is the model FLOP/s achieved in the steady steps over the device's peak. The FLOPs of one
  training step (forward and backward, every micro-batch of it) are counted once, on the second
  optimizer step, by ``torch.utils.flop_counter.FlopCounterMode``; it only observes the operations
  (each one still runs as it would), so the script's numbers do not change. That step is then left
  out of the steady-state means. Each counted operation is filed under the precision it ran in
  (its first tensor input's dtype; an FP32 GEMM or convolution under TF32 when torch allows TF32
  for it), and MFU is ``sum(flops[p] / peak[p]) / step time`` over the precisions, i.e. the usual
  achieved-over-peak ratio when one precision dominates. The peaks are
  :mod:`traindoctor.runtime.peak_flops`'s table; a device not in it, a precision it has no peak
  for, or a CPU run gets no MFU.

Unvalidated on hardware: the counting and the arithmetic are tested on the CPU; no GPU run has
checked an MFU against a known one yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from traindoctor.runtime.live import fields_repr
from traindoctor.runtime.peak_flops import device_peaks, peak_for

#: Names of a dict batch's token ids and their padding mask (Hugging Face's).
IDS_KEY = "input_ids"
MASK_KEY = "attention_mask"
_INT_DTYPES = ("torch.int64", "torch.int32", "torch.int16", "torch.uint8", "torch.int8")


def _is_ids(value: Any) -> bool:
    return hasattr(value, "dim") and hasattr(value, "dtype") and value.dim() == 2 and str(value.dtype) in _INT_DTYPES


def batch_tokens(batch: Any) -> int | None:
    """Tokens in a batch of token ids (see the module docstring), or None when it holds none, or
    when its attention mask is on the device (it cannot be counted without waiting for it).
    Called on every batch the loop fetches: an object it cannot read is no token batch."""
    try:
        return _tokens(batch)
    except Exception:  # fail-open: a batch type of the script's own
        return None


def _tokens(batch: Any) -> int | None:
    ids: Any = None
    mask: Any = None
    if isinstance(batch, Mapping):
        ids = batch.get(IDS_KEY)
        if not _is_ids(ids):
            ids = next((v for v in list(batch.values())[:16] if _is_ids(v)), None)
        mask = batch.get(MASK_KEY)
    elif isinstance(batch, (list, tuple)):
        ids = next((v for v in batch[:16] if _is_ids(v)), None)
    elif _is_ids(batch):
        ids = batch
    if ids is None:
        return None
    if mask is not None and hasattr(mask, "shape") and tuple(mask.shape) == tuple(ids.shape):
        if getattr(getattr(mask, "device", None), "type", "cpu") != "cpu":
            return None
        return int(mask.count_nonzero())
    return int(ids.numel())


def has_embedding(models: Iterable[Any]) -> bool:
    """Whether one of the root models has an ``nn.Embedding`` (token ids are fed to one)."""
    import torch

    kinds = (torch.nn.Embedding, torch.nn.EmbeddingBag)
    return any(isinstance(m, kinds) for root in models for m in root.modules())


def _precision(dtype: Any, tf32: bool) -> str:
    import torch

    if dtype == torch.bfloat16:
        return "bf16"
    if dtype == torch.float16:
        return "fp16"
    if dtype == torch.float32:
        return "tf32" if tf32 else "fp32"
    return str(dtype).replace("torch.", "")


def _tf32_allowed() -> tuple[bool, bool]:
    """Whether torch lets FP32 GEMMs and convolutions use TF32 (matmul, cuDNN)."""
    import torch

    matmul = bool(torch.backends.cuda.matmul.allow_tf32) or torch.get_float32_matmul_precision() != "highest"
    return matmul, bool(torch.backends.cudnn.allow_tf32)


class _Noting:
    """One operation's FLOP formula that also files the FLOPs under the operation's precision."""

    #: ``FlopCounterMode`` passes the operation's tensors (not their shapes) to such a formula.
    _get_raw = True

    def __init__(self, count: Any, counts: dict[str, int], tf32: bool) -> None:
        self.count, self.counts, self.tf32 = count, counts, tf32

    def __call__(self, *args: Any, out_val: Any = None, **kwargs: Any) -> Any:
        flops = self.count(*args, out_val=out_val, **kwargs)
        first = next((a for a in args if hasattr(a, "dtype") and hasattr(a, "shape")), None)
        key = _precision(getattr(first, "dtype", None), self.tf32)
        self.counts[key] = self.counts.get(key, 0) + int(flops)
        return flops


class StepFlops:
    """Counts the FLOPs of the operations run between :meth:`start` and :meth:`stop`, by precision.

    A ``FlopCounterMode`` whose counting functions also note each operation's precision. Entered
    and left on the training thread at optimizer-step boundaries; :meth:`stop` leaves it only when
    it is the innermost dispatch mode (a mode the script entered meanwhile must be left first), so
    it never pops the script's own.
    """

    def __init__(self) -> None:
        self.by_precision: dict[str, int] = {}
        self._counter: Any = None

    def __repr__(self) -> str:
        return fields_repr(self, ("by_precision",))

    @property
    def active(self) -> bool:
        return self._counter is not None

    @staticmethod
    def compiled_graphs() -> int:
        """Graphs torch.compile has compiled in this process so far (0 when dynamo is not loaded)."""
        import sys

        counters = getattr(sys.modules.get("torch._dynamo.utils"), "counters", None)
        return int(counters["stats"]["unique_graphs"]) if counters else 0

    @staticmethod
    def possible(compiled_before: int = 0) -> bool:
        """False when another dispatch mode is active, or torch.compile has compiled a graph since
        ``compiled_before`` (a compiled model under a dispatch mode runs differently)."""
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        if _get_current_dispatch_mode() is not None:
            return False
        return StepFlops.compiled_graphs() <= compiled_before

    def start(self) -> None:
        import torch
        from torch.utils.flop_counter import FlopCounterMode, flop_registry

        matmul_tf32, conv_tf32 = _tf32_allowed()
        conv_ops = {torch.ops.aten.convolution, torch.ops.aten._convolution, torch.ops.aten.convolution_backward}
        counts = self.by_precision
        mapping = {
            op: _Noting(count, counts, conv_tf32 if op in conv_ops else matmul_tf32)
            for op, count in flop_registry.items()
        }
        self._counter = FlopCounterMode(display=False, custom_mapping=mapping)
        self._counter.__enter__()

    def stop(self) -> bool:
        """Leave the mode if it is innermost; True when it was left (the count is complete)."""
        from torch.utils._python_dispatch import _get_current_dispatch_mode

        counter = self._counter
        if counter is None:
            return False
        if _get_current_dispatch_mode() is not counter.mode:
            return False
        self._counter = None
        counter.__exit__(None, None, None)
        return True


class Throughput:
    """Steady-state throughput of a run: what the JSON report's ``profile.throughput`` holds."""

    __slots__ = (
        "device",
        "flops_per_sample",
        "flops_per_step",
        "flops_step",
        "mfu",
        "mfu_note",
        "peak_flops",
        "precision_flops",
        "samples_per_s",
        "tokens_per_s",
    )

    samples_per_s: float | None
    tokens_per_s: float | None
    #: The counted step's index, its FLOPs (all precisions) and per sample, and by precision.
    flops_step: int | None
    flops_per_step: int | None
    flops_per_sample: float | None
    precision_flops: dict[str, int]
    #: The peak table's device label and peaks (FLOP/s) by precision; None when not in the table.
    device: str | None
    peak_flops: dict[str, float] | None
    mfu: float | None
    #: Why no MFU is given (empty when it is).
    mfu_note: str

    def __init__(self, samples_per_s: float | None = None, tokens_per_s: float | None = None) -> None:
        self.samples_per_s = samples_per_s
        self.tokens_per_s = tokens_per_s
        self.flops_step = self.flops_per_step = None
        self.flops_per_sample = None
        self.precision_flops = {}
        self.device = None
        self.peak_flops = None
        self.mfu = None
        self.mfu_note = ""

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    def add_flops(
        self,
        step: int,
        by_precision: Mapping[str, int],
        samples: int,
        step_s: float,
        device_name: str | None,
        gpu: bool,
    ) -> None:
        """The counted step's FLOPs (``samples`` in it) and, where the device's peak is known, MFU:
        at the steady samples/s when both are known (batches of another size scale), else over
        ``step_s``, the steady steps' mean wall time."""
        self.flops_step = step
        self.precision_flops = dict(by_precision)
        total = sum(by_precision.values())
        self.flops_per_step = total
        self.flops_per_sample = total / samples if samples else None
        if not gpu:
            self.mfu_note = "CPU run: no MFU"
            return
        found = device_peaks(device_name)
        if found is None:
            self.mfu_note = f"no peak known for {device_name or 'this device'}: no MFU"
            return
        self.device, self.peak_flops = found
        if total <= 0 or step_s <= 0:
            self.mfu_note = "no FLOPs counted in the step"
            return
        at_peak = 0.0
        for precision, flops in by_precision.items():
            peak = peak_for(self.peak_flops, precision)
            if peak is None:
                self.mfu_note = f"{self.device} has no {precision} peak: no MFU"
                return
            at_peak += flops / peak
        if samples and self.samples_per_s:
            self.mfu = at_peak / samples * self.samples_per_s
        else:
            self.mfu = at_peak / step_s

    def to_dict(self) -> dict[str, Any]:
        def rounded(value: float | None, digits: int) -> float | None:
            return None if value is None else round(value, digits)

        return {
            "samples_per_s": rounded(self.samples_per_s, 3),
            "tokens_per_s": rounded(self.tokens_per_s, 3),
            "flops_step": self.flops_step,
            "flops_per_step": self.flops_per_step,
            "flops_per_sample": rounded(self.flops_per_sample, 1),
            "flops_by_precision": dict(self.precision_flops),
            "peak_device": self.device,
            "peak_tflops": None if self.peak_flops is None else {k: v / 1e12 for k, v in self.peak_flops.items()},
            "mfu": rounded(self.mfu, 4),
            "mfu_note": self.mfu_note or None,
            "mfu_validated": False,
        }
