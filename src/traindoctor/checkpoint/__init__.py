"""Full-state checkpoints that really resume, and a reader that never executes a checkpoint.

``save``/``load`` store and restore model, optimizer(s), scheduler(s), GradScaler, counters,
every RNG (torch CPU and CUDA, NumPy, ``random``) and the data position, in a file that loads
with ``torch.load(path, weights_only=True)``, written atomically. ``ResumableLoader`` is a
DataLoader whose mid-epoch position can be saved. ``inspect_checkpoint`` lists what a
checkpoint holds without unpickling it.

Importing this package does not import torch; the names below load their module on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CheckpointWriteError",
    "PendingCheckpoint",
    "ResumableLoader",
    "ResumableSampler",
    "ResumeInfo",
    "inspect_checkpoint",
    "load",
    "save",
    "wait",
]

_LAZY = {
    "CheckpointWriteError": "traindoctor.checkpoint.atomic",
    "save": "traindoctor.checkpoint.core",
    "load": "traindoctor.checkpoint.core",
    "ResumeInfo": "traindoctor.checkpoint.components",
    "ResumableLoader": "traindoctor.checkpoint.data",
    "ResumableSampler": "traindoctor.checkpoint.data",
    "inspect_checkpoint": "traindoctor.checkpoint.inspect",
    "PendingCheckpoint": "traindoctor.checkpoint.sharded",
    "wait": "traindoctor.checkpoint.sharded",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        attr = "wait_pending" if name == "wait" else name
        return getattr(importlib.import_module(_LAZY[name]), attr)
    raise AttributeError(name)
