"""What the framework handles itself: its own checkpoint writers.

Lightning, the Hugging Face ``Trainer`` and ``accelerate`` write their checkpoints as several
files (``optimizer.pt``, ``scheduler.pt``, ``rng_state.pth``, ``pytorch_model.bin``, ...) or
through an in-memory buffer. One of those files alone looks like an incomplete checkpoint (the
weights without the optimizer), but the framework saved the rest next to it and restores it all
together. A ``torch.save`` made while one of these writers is on the call stack is the framework's,
not the user's, and the checkpoint rules do not judge it.

Recognised by the function's module and qualified name (never by words in a file path). Thin
wrappers such as ``accelerator.save(obj, path)`` are *not* checkpoint writers: what the user saves
through them is the user's choice and is judged like ``torch.save``.

No torch and no framework import.
"""

from __future__ import annotations

import sys
from types import FrameType

#: module -> qualified names of the functions that write a framework checkpoint.
CHECKPOINT_WRITERS: dict[str, frozenset[str]] = {
    # accelerate: ``Accelerator.save_state`` / ``save_model`` and what they call.
    "accelerate.accelerator": frozenset({"Accelerator.save_state", "Accelerator.save_model"}),
    "accelerate.checkpointing": frozenset({"save_accelerator_state", "save_custom_state"}),
    # transformers: the Trainer's checkpoints and model saves, ``save_pretrained``.
    "transformers.trainer": frozenset(
        {
            "Trainer._save_checkpoint",
            "Trainer.save_model",
            "Trainer._save",
            "Trainer._save_rng_state",
            "Trainer._save_optimizer_and_scheduler",
            "Trainer._save_scaler",
        }
    ),
    "transformers.modeling_utils": frozenset({"PreTrainedModel.save_pretrained"}),
    # Lightning (both package names) and Fabric: the trainer's checkpoint and its checkpoint IO.
    "lightning.pytorch.trainer.trainer": frozenset({"Trainer.save_checkpoint"}),
    "pytorch_lightning.trainer.trainer": frozenset({"Trainer.save_checkpoint"}),
    "lightning.fabric.fabric": frozenset({"Fabric.save"}),
    "lightning_fabric.fabric": frozenset({"Fabric.save"}),
    "lightning.fabric.plugins.io.torch_io": frozenset({"TorchCheckpointIO.save_checkpoint"}),
    "lightning_fabric.plugins.io.torch_io": frozenset({"TorchCheckpointIO.save_checkpoint"}),
}

#: Top-level packages of the frameworks above (a cheap first filter).
FRAMEWORK_PACKAGES = frozenset(m.split(".", 1)[0] for m in CHECKPOINT_WRITERS)

#: How far up the stack to look (a framework writer is a few frames above ``torch.save``).
MAX_DEPTH = 40


def _qualname(frame: FrameType) -> str:
    code = frame.f_code
    return getattr(code, "co_qualname", code.co_name)


def framework_writer(frame: FrameType | None, max_depth: int = MAX_DEPTH) -> str | None:
    """``"module:Qual.name"`` of the framework checkpoint writer on the stack above ``frame``.

    ``None`` when no framework writer called this save (the user saved it). Cost: a few frame
    reads, only when a framework is imported at all.
    """
    if not any(pkg in sys.modules for pkg in FRAMEWORK_PACKAGES):
        return None
    depth = 0
    while frame is not None and depth < max_depth:
        module = frame.f_globals.get("__name__", "")
        names = CHECKPOINT_WRITERS.get(module)
        if names is not None:
            qual = _qualname(frame)
            if qual in names or frame.f_code.co_name in {n.rsplit(".", 1)[-1] for n in names}:
                return f"{module}:{qual}"
        frame = frame.f_back
        depth += 1
    return None


def caller_is_framework_writer(skip: int = 1) -> str | None:
    """:func:`framework_writer` for the caller's stack (``skip`` frames above this one)."""
    return framework_writer(sys._getframe(skip + 1))
