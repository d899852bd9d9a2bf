"""What inspecting a checkpoint finds: its components, and what a resume from it would lack.

Shared by the reader of torch files (:mod:`traindoctor.checkpoint.file_inspect`) and of
``torch.distributed.checkpoint`` directories (:mod:`traindoctor.checkpoint.dcp_inspect`).
:func:`resume_gaps` names the gaps by rule code:

* TD501 when model weights are present but no optimizer state;
* TD502 when the optimizer's param groups carry ``initial_lr`` (set by every LR scheduler) but no
  scheduler state is present;
* TD503 when a GradScaler slot exists but holds no loss scale;
* TD504 when no RNG state is present, or CUDA tensors are saved without CUDA RNG states.

Only evidence in the file counts (precision over recall): a checkpoint without ``initial_lr``
may have trained without a scheduler, so TD502 stays silent there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from traindoctor.checkpoint.pickle_values import GlobalUse, TensorInfo


class CheckpointReadError(ValueError):
    """The file cannot be read as a checkpoint, or is refused: reported with a clear message, exit code 2."""


@dataclass
class Component:
    """One recognised part of a checkpoint (``kind`` = model/optimizer/scheduler/...)."""

    kind: str
    path: str
    summary: str
    details: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Gap:
    """What a resume from the checkpoint would lack, under the code of the rule that names it.

    The library knows the codes only; ``traindoctor ckpt inspect`` reports each gap as a
    :class:`~traindoctor.finding.Finding` with its rule's name and severity.
    """

    code: str
    filename: str
    message: str
    evidence: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The gap as plain data (``ckpt inspect`` prints its finding instead)."""
        return {"code": self.code, "filename": self.filename, "message": self.message, "evidence": self.evidence}


@dataclass
class Inspection:
    """Everything ``inspect_checkpoint`` found in one checkpoint file or DCP directory."""

    path: str
    format: str
    size_bytes: int
    root: Any
    unsafe: list[GlobalUse]
    globals: list[str]
    tensors: list[tuple[str, TensorInfo]]
    components: list[Component]
    #: What a resume from this checkpoint would lack (TD501-TD504), by rule code.
    findings: list[Gap]
    step: int | None = None
    epoch: int | None = None
    missing_storages: list[str] = field(default_factory=list)
    #: DCP directories: who wrote what (one line each).
    ranks: list[str] = field(default_factory=list)
    #: DCP directories: non-tensor entries (optimizer hyperparameters ...).
    scalars: list[str] = field(default_factory=list)
    #: Whole pickled objects (``torch.save(model)``): the classes unpickling would import.
    imports: list[str] = field(default_factory=list)
    #: Values of the pickle whose hashes a crafted stream can make collide (see ``ReadResult``).
    collidable: int = 0

    @property
    def safe(self) -> bool:
        return not self.unsafe

    @property
    def resumable(self) -> bool:
        """Safe, nothing missing found, and model and optimizer state really there."""
        kinds = {c.kind for c in self.components}
        return self.safe and not self.findings and {"model", "optimizer"} <= kinds

    @property
    def ok(self) -> bool:
        return self.resumable

    def to_dict(self) -> dict[str, Any]:
        """The JSON of ``ckpt inspect`` (whose findings also carry their rules' names and severities)."""
        return {
            "file": self.path,
            "format": self.format,
            "size_bytes": self.size_bytes,
            "safe": self.safe,
            "resumable": self.resumable,
            "unsafe_globals": sorted({u.ref.dotted for u in self.unsafe}),
            "globals": self.globals,
            "tensors": [
                {"key": k, "dtype": t.dtype, "shape": list(t.shape), "bytes": t.nbytes, "device": t.device}
                for k, t in self.tensors
            ],
            "components": [
                {"kind": c.kind, "key": c.path, "summary": c.summary, "details": c.details} for c in self.components
            ],
            "step": self.step,
            "epoch": self.epoch,
            "findings": [f.to_dict() for f in self.findings],
            "ranks": self.ranks,
            "imports": self.imports,
        }


def resume_gaps(path: str, comps: list[Component], facts: dict[str, Any]) -> list[Gap]:
    """What a resume from the checkpoint at ``path`` would lack, judged from its components.

    ``facts`` holds what the reader noticed beside the components: ``initial_lr`` (the
    optimizer's param groups carry it), ``scaler_slots`` (empty entries named like a scaler),
    ``rng`` (the generators saved: torch, cuda, numpy, python) and ``cuda_tensors``.
    """
    kinds = {c.kind for c in comps}
    found: list[Gap] = []
    if "model" in kinds and "optimizer" not in kinds:
        found.append(
            Gap(
                "TD501",
                path,
                "Checkpoint holds model weights but no optimizer state: momentum and "
                "Adam moments restart from zero on resume; save `optimizer.state_dict()` too.",
                {"model": [c.path for c in comps if c.kind == "model"], "optimizer": "missing"},
            )
        )
    if facts["initial_lr"] and "scheduler" not in kinds:
        found.append(
            Gap(
                "TD502",
                path,
                "The optimizer's param groups carry `initial_lr` (an LR scheduler "
                "was used) but the checkpoint has no scheduler state: the schedule restarts on "
                "resume; save `scheduler.state_dict()`.",
                {"initial_lr_in_param_groups": True, "scheduler": "missing"},
            )
        )
    if facts["scaler_slots"] and "scaler" not in kinds:
        found.append(
            Gap(
                "TD503",
                path,
                "The checkpoint's GradScaler entry is empty: the loss scale restarts "
                "at its initial value on resume; save `scaler.state_dict()`.",
                {"empty_scaler_entries": facts["scaler_slots"]},
            )
        )
    if "model" in kinds or "optimizer" in kinds:
        rng = facts["rng"]
        if not rng:
            found.append(
                Gap(
                    "TD504",
                    path,
                    "No RNG state in the checkpoint: dropout, augmentation and "
                    "shuffling draw different numbers after resume; save torch's, NumPy's and "
                    "Python's RNG states (`traindoctor.checkpoint.save` does).",
                    {"rng_states": [], "missing": ["torch", "numpy", "python"]},
                )
            )
        elif facts["cuda_tensors"] and "cuda" not in rng:
            found.append(
                Gap(
                    "TD504",
                    path,
                    "The checkpoint holds CUDA tensors but no CUDA RNG state: "
                    "the CPU generator alone misses `torch.cuda.get_rng_state_all()`.",
                    {"rng_states": sorted(rng), "missing": ["cuda"]},
                )
            )
    return found
