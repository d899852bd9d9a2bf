"""Optimizer probe: step boundaries and backward counting.

Uses torch's public global optimizer hooks (``register_optimizer_step_pre_hook`` /
``register_optimizer_step_post_hook``), which every ``torch.optim.Optimizer`` subclass runs, so
nothing on the optimizer is patched. Backward calls are counted by wrapping
``torch.autograd.backward`` (``Tensor.backward`` looks it up at call time): one counter increment
per call, after the original returned. Counting backward calls per optimizer step reveals gradient
accumulation.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from traindoctor.runtime.probes.base import Probe


class OptimizerProbe(Probe):
    """Emits optimizer step events and counts ``backward()`` calls."""

    name = "optimizer"
    order = 20

    def install(self, session: Any) -> None:
        super().install(session)
        import torch.autograd
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self.keep_handle(register_optimizer_step_pre_hook(self._pre))
        self.keep_handle(register_optimizer_step_post_hook(self._post))
        self.patch(torch.autograd, "backward", self._wrap_backward)

    def _pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            self.session.record_optimizer_pre(optimizer)  # type: ignore[union-attr]
        except Exception as exc:
            self.fail("optimizer pre-step", exc)
        return None

    def _post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            self.session.record_optimizer_post(optimizer)  # type: ignore[union-attr]
        except Exception as exc:
            self.fail("optimizer post-step", exc)

    def _wrap_backward(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        @functools.wraps(orig)
        def backward(*args: Any, **kwargs: Any) -> Any:
            result = orig(*args, **kwargs)
            try:
                probe.session.record_backward()  # type: ignore[union-attr]
            except Exception as exc:
                probe.fail("backward", exc)
            return result

        return backward
