"""Losses probe: the inputs of the logits losses (``binary_cross_entropy_with_logits``, ``cross_entropy``).

Patches the two functions of ``torch.nn.functional`` (``BCEWithLogitsLoss`` and
``CrossEntropyLoss`` call them through the module attribute, so the loss modules are covered
too) and emits ``on_loss_input(kind, logits)`` before the original runs, for calls made with
autograd on (training; evaluation under ``no_grad`` is not emitted). Installed only when a monitor
listens; nothing is emitted while ``torch.compile`` traces. The wrapper changes nothing about the
call: same arguments, same result.
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

#: ``torch.nn.functional`` function -> the ``kind`` passed to ``on_loss_input``.
LOSSES = {"binary_cross_entropy_with_logits": "bce_with_logits", "cross_entropy": "cross_entropy"}


class LossesProbe(Probe):
    """Emits the input of each logits loss computed with autograd on."""

    name = "losses"
    order = 95

    def applies(self, session: Session) -> bool:
        return session.listens("on_loss_input")

    def install(self, session: Session) -> None:
        super().install(session)
        import torch
        import torch.nn.functional as F

        self._grad_enabled = torch.is_grad_enabled
        for attr, kind in LOSSES.items():
            if callable(getattr(F, attr, None)):
                self.patch(F, attr, functools.partial(self._wrap, kind=kind))

    def _wrap(self, original: Callable[..., Any], *, kind: str) -> Callable[..., Any]:
        probe = self
        timer = self.watched.timer
        perf = time.perf_counter
        grad_enabled = self._grad_enabled

        @functools.wraps(original)
        def loss(*args: Any, **kwargs: Any) -> Any:
            entered = perf()
            try:
                if grad_enabled() and not is_compiling():
                    logits = args[0] if args else kwargs.get("input")
                    if logits is not None:
                        probe.emit("on_loss_input", kind, logits)
            except Exception as exc:  # fail-open
                probe.fail(kind, exc)
            timer.self_total += perf() - entered  # the doctor's own work (step_timer)
            return original(*args, **kwargs)

        return loss
