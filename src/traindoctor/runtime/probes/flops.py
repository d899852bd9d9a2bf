"""FLOPs probe: counts one training step's FLOPs for MFU (CUDA runs only).

From the end of the first optimizer step to the end of the second, a
:class:`~traindoctor.runtime.throughput.StepFlops` (``torch.utils.flop_counter.FlopCounterMode``)
counts the FLOPs of every operation the training thread runs (the second step's forward and
backward, every micro-batch of it); the session's profile turns them into MFU
(:mod:`traindoctor.runtime.throughput`). The counter only observes the operations, so the script's
numbers are the same; the counted step runs slower and is left out of the steady-state means.

Not installed on a CPU run (no MFU is given there). Nothing is counted when another dispatch mode
is active or torch.compile has compiled a graph since the watch started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traindoctor.runtime.probes.base import Probe
from traindoctor.runtime.throughput import StepFlops

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session

#: The count starts when this step ends and stops when the next one does.
START_AFTER_STEP = 1


class FlopsProbe(Probe):
    """Counts the FLOPs of step ``START_AFTER_STEP + 1``; gives them to the session."""

    name = "flops"
    order = 90

    def __init__(self) -> None:
        super().__init__()
        self._flops: StepFlops | None = None
        self._done = False
        self._compiled_before = 0

    def applies(self, session: Session) -> bool:
        return bool(session.device.cuda_available)

    def install(self, session: Session) -> None:
        super().install(session)
        self._compiled_before = StepFlops.compiled_graphs()
        session.add_step_listener(self._on_step)

    def _on_step(self, record: Any) -> None:
        if self._done:
            return
        try:
            flops = self._flops
            if flops is None:
                if record.index == START_AFTER_STEP:
                    if not StepFlops.possible(self._compiled_before):
                        self._finish()
                        return
                    self._flops = StepFlops()
                    self._flops.start()
                return
            if flops.stop():
                record.flop_counted = True
                self.watched.record_step_flops(record.index, flops.by_precision, record.samples)
                self._finish()
        except Exception as exc:  # fail-open: no MFU, the run goes on
            self.fail("count", exc)
            self._finish()

    def _finish(self) -> None:
        self._done = True
        self.watched.remove_step_listener(self._on_step)

    def uninstall(self) -> None:
        flops = self._flops
        if flops is not None and flops.active:
            flops.stop()  # the run ended inside the counted step: its count is dropped
        super().uninstall()
