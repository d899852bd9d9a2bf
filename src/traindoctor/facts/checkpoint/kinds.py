"""One definition of "checkpoint" versus "export", shared by the checker and the doctor.

TD501-TD504 judge *checkpoints*: files a run is resumed from, which must hold everything the
run needs to continue (optimizer, scheduler, scaler, RNG states, data position). A weights-only
*export* (the best model so far, the final model for inference) is not a checkpoint: asking it to
hold optimizer state would be noise. Both halves of each rule classify a save with
:func:`save_kind`, from the same facts:

* ``holds_resume_state``: the save holds more than weights (optimizer/scheduler/scaler state,
  RNG states, a step or epoch counter): someone meant to resume from it -> checkpoint;
* ``read_back``: the script has a resume path that reads this file back (a ``torch.load`` of the
  same file before or outside the training loop, or a restore of optimizer state) -> checkpoint;
* ``quality_guarded``: the save runs under a "better than the best so far" test
  (``if val_loss < best``, ``if is_best``, or by its shape ``if score > top: top = score``)
  -> export;
* ``export_name``: the file name says export (``best``, ``final``, ``export``, ...) -> export;
* ``in_training_loop``: a save inside the loop that trains, repeated (periodic) -> checkpoint;
  a save after training -> export.

The static checker reads the facts from the source; the runtime doctor reads the same facts from
the source line of the ``torch.save`` it saw (through the static index, so the answer is the
checker's) and, where the source cannot be read, from what it observed (contents, path).
This module must not import torch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

CHECKPOINT = "checkpoint"
EXPORT = "export"

#: File names that say the file is an export of weights, not a resume point.
_RX_EXPORT_NAME = re.compile(r"best|final|export|deploy|inference|release|pretrained", re.I)
#: Names in an ``if`` test that make it a "better than the best so far" guard.
_RX_QUALITY = re.compile(
    r"best|improv|top_?k|(max|min|highest|lowest)_?\w*(acc|score|metric|map|iou|f1|auc|psnr|ssim|loss|err|bleu|prec)",
    re.I,
)


@dataclass(frozen=True)
class SaveFacts:
    """What is known about one save (see the module docstring)."""

    holds_resume_state: bool = False
    read_back: bool = False
    quality_guarded: bool = False
    export_name: bool = False
    in_training_loop: bool = True


def save_kind(facts: SaveFacts) -> str:
    """:data:`CHECKPOINT` or :data:`EXPORT` for a save with these facts."""
    if facts.holds_resume_state or facts.read_back:
        return CHECKPOINT
    if facts.quality_guarded or facts.export_name or not facts.in_training_loop:
        return EXPORT
    return CHECKPOINT


def export_name(path_parts: Iterable[str] | str | None) -> bool:
    """Whether a file name (or the literal pieces of a path expression) says "export"."""
    if path_parts is None:
        return False
    parts = [path_parts] if isinstance(path_parts, str) else list(path_parts)
    return any(_RX_EXPORT_NAME.search(os.path.basename(str(p)) or str(p)) for p in parts)


def quality_guard(names: Iterable[str]) -> bool:
    """Whether names read by an ``if`` test make it a best-so-far guard."""
    return any(_RX_QUALITY.search(n) for n in names)
