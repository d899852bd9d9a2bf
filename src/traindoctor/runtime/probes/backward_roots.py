"""Backward-roots probe: the tensor each ``loss.backward()`` starts from.

Patches ``torch.Tensor.backward`` (the method; ``torch.autograd.backward`` itself is the optimizer
probe's) and emits ``on_loss_backward(loss)`` before the original runs, so a monitor can read the
root of the graph (``loss.grad_fn``) before autograd frees it. Installed only when a monitor
listens; nothing is emitted while ``torch.compile`` traces. Arguments and result pass unchanged.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.live import is_compiling
from traindoctor.runtime.probes.base import Probe

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session


class BackwardRootsProbe(Probe):
    """Emits the tensor of every ``Tensor.backward()`` call."""

    name = "backward-roots"
    order = 96

    def applies(self, session: Session) -> bool:
        return session.listens("on_loss_backward")

    def install(self, session: Session) -> None:
        super().install(session)
        import torch

        self.patch(torch.Tensor, "backward", self._wrap)

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self
        timer = self.watched.timer
        perf = time.perf_counter

        @functools.wraps(original)
        def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            entered = perf()
            try:
                if not is_compiling():
                    probe.emit("on_loss_backward", tensor)
            except Exception as exc:  # fail-open
                probe.fail("Tensor.backward", exc)
            timer.self_total += perf() - entered  # the doctor's own work (step_timer)
            return original(tensor, *args, **kwargs)

        return backward
