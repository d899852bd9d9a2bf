"""The checkpoint index of one file: its jobs composed, built once per file.

The TD50x rules all ask questions about one file, so they are answered here once
(:func:`checkpoint_index`, cached per :class:`~traindoctor.static.context.FileContext`), each by
the job that knows: ``objects`` (the training objects the file builds), ``loops`` (where it
trains), ``saves`` (where it saves and what each save holds), ``paths`` (which file a save writes),
``checkpoints`` (which saves are training checkpoints) and ``resume`` (what a resumed run gets
back). A file that neither saves nor loads a checkpoint gets an empty index, cheaply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from traindoctor.facts.checkpoint.static.base import TrainingObjects
from traindoctor.facts.checkpoint.static.checkpoints import TrainingCheckpoints
from traindoctor.facts.checkpoint.static.contents import SaveContents
from traindoctor.facts.checkpoint.static.loops import TrainingLoops
from traindoctor.facts.checkpoint.static.paths import CheckpointPaths
from traindoctor.facts.checkpoint.static.resume import ResumeAnalysis
from traindoctor.facts.checkpoint.static.saves import Saves

if TYPE_CHECKING:
    from traindoctor.static.context import FileContext


class CheckpointIndex:
    """The checkpoint facts of one file (see the module docstring)."""

    def __init__(self, ctx: FileContext) -> None:
        self.objects = TrainingObjects(ctx)
        self.loops = TrainingLoops(self.objects)
        self.contents = SaveContents(self.objects)
        self.saves = Saves(self.objects, self.loops, self.contents)
        if self.saves.found_any:
            self.objects.find()
            self.saves.find()
        self.paths = CheckpointPaths(self.objects, self.saves)
        self.checkpoints = TrainingCheckpoints(self.objects, self.loops, self.contents, self.saves, self.paths)
        self.resume = ResumeAnalysis(self.objects, self.saves)


def checkpoint_index(ctx: FileContext) -> CheckpointIndex:
    """The (cached) checkpoint index of a file."""
    return ctx.shared("checkpoints", CheckpointIndex)
