"""A base for monitors that judge the learning rate against the effective batch (TD203, TD206).

Both need the same two recordings of the primary optimizer: its learning rates at the first steps
and the samples each step consumed. Importing this module does not import torch (rule modules
import it at module level); the recorders are imported when a session creates the monitor.
"""

from __future__ import annotations

from typing import Any

from traindoctor.runtime.events import Monitor


class LrStepMonitor(Monitor):
    """Records ``self.lrs`` (an ``LrTrace``) and ``self.steps`` (a ``StepFacts``) for subclasses."""

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        from traindoctor.runtime.train_facts import LrTrace, StepFacts

        self.steps = StepFacts()
        self.lrs = LrTrace()

    def on_before_optimizer_step(self, optimizer: object) -> None:
        self.lrs.add(optimizer)

    def on_step_end(self, step_record: object) -> None:
        self.steps.add(step_record)
