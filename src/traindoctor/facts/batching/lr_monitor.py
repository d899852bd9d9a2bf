"""A base for monitors that judge the learning rate against the effective batch (TD203, TD206).

Both need the same two recordings of the primary optimizer: its learning rates at the first steps
and the samples each step consumed. Importing this module does not import torch (rule modules
import it at module level); the recorders are imported when a session creates the monitor.
"""

from __future__ import annotations

from typing import Any

from traindoctor.runtime.events import Monitor


class LrStepMonitor(Monitor):
    """Records ``self.lrs`` (an ``LrTrace``) and gives ``self.steps`` (a ``StepFacts`` of the
    session's step records, read at the end) to subclasses.

    The LR recording is shared by every such monitor of a session (one update per optimizer step,
    however many rules read it): the hot path pays once.
    """

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        from traindoctor.runtime.live import session_state

        self._shared = session_state(session, "lr_step_facts", _SharedLrFacts)
        self.lrs = self._shared.lrs

    @property
    def steps(self) -> Any:
        """Backward calls per finished step (from the session's records; no per-step copy)."""
        from traindoctor.facts.batching.runtime import StepFacts

        return StepFacts.of(self.session)

    def on_before_optimizer_step(self, optimizer: object) -> None:
        shared = self._shared
        mark = getattr(self.session, "optimizer_calls", None)
        if mark is None:  # a session without the counter (tests' fakes)
            mark = (id(optimizer), self.session.step, self.session.backward_calls_this_step)
        if shared.mark == mark:
            return  # another LR monitor recorded this optimizer call already
        shared.mark = mark
        self.lrs.add(optimizer)


class _SharedLrFacts:
    def __init__(self) -> None:
        from traindoctor.facts.batching.runtime import LrTrace

        self.lrs = LrTrace()
        self.mark: Any = None
