"""Optimizer probe: step boundaries and backward counting.

Uses torch's public global optimizer hooks (``register_optimizer_step_pre_hook`` /
``register_optimizer_step_post_hook``), which every ``torch.optim.Optimizer`` subclass runs, so
nothing on the optimizer is patched. ``Optimizer.__init__`` is wrapped only to remember where the user
built each optimizer (for findings about its parameter groups). Backward calls are counted by wrapping
``torch.autograd.backward`` (``Tensor.backward`` looks it up at call time): one counter increment
per call, after the original returned. Counting backward calls per optimizer step reveals gradient
accumulation. The lr-0 step that ``torch.distributed.checkpoint`` runs to create a fresh
optimizer's state before loading a checkpoint into it is not a training step and is not reported.
Nor is a step run from inside the same optimizer's step: torch runs the hooks in every patched
``step`` of the class chain, so a subclass whose ``step`` calls ``super().step()`` would otherwise
count twice per call. The same wrapper times each call (two ``perf_counter`` reads) for the profile's backward row,
and marks the training thread's phase for the host-work sampler.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.live import user_site
from traindoctor.runtime.probes.base import Probe

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session


class OptimizerProbe(Probe):
    """Emits optimizer step events and counts ``backward()`` calls."""

    name = "optimizer"
    order = 20

    def __init__(self) -> None:
        super().__init__()
        #: Optimizers inside a step that is not training (DCP's lr-0 state initialisation).
        self._not_training: set[int] = set()
        #: Optimizer id -> the frame of torch's step wrapper whose step is being recorded.
        self._outer: dict[int, FrameType] = {}

    def install(self, session: Session) -> None:
        super().install(session)
        import torch.autograd
        from torch.optim.optimizer import (
            Optimizer,
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self.patch(Optimizer, "__init__", self._wrap_init)
        self.keep_handle(register_optimizer_step_pre_hook(self._pre))
        self.keep_handle(register_optimizer_step_post_hook(self._post))
        self.patch(torch.autograd, "backward", self._wrap_backward)

    def _wrap_init(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        probe = self
        session = self.watched

        @functools.wraps(orig)
        def __init__(optimizer: Any, *args: Any, **kwargs: Any) -> None:
            orig(optimizer, *args, **kwargs)
            try:
                session.note_optimizer_site(optimizer, user_site(2))
            except Exception as exc:
                probe.fail("Optimizer.__init__", exc)

        return __init__

    def _pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        try:
            key = id(optimizer)
            outer = self._outer.get(key)
            if outer is not None and _on_stack(outer):
                return None  # ``super().step()`` inside the step being recorded
            if not optimizer.state and _dcp_state_init(optimizer):
                self._not_training.add(key)
                return None
            self._outer[key] = sys._getframe(1)  # torch's wrapper, which calls the post hook too
            self.watched.record_optimizer_pre(optimizer)
        except Exception as exc:
            self.fail("optimizer pre-step", exc)
        return None

    def _post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self._not_training and id(optimizer) in self._not_training:
            self._not_training.discard(id(optimizer))
            return
        outer = self._outer.get(id(optimizer))
        if outer is not None:
            if outer is not sys._getframe(1):
                return  # the end of a nested step; the outer one ends later
            del self._outer[id(optimizer)]
        try:
            self.watched.record_optimizer_post(optimizer)
        except Exception as exc:
            self.fail("optimizer post-step", exc)

    def _wrap_backward(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        from traindoctor.runtime.phases import PHASE_BACKWARD

        probe = self
        perf = time.perf_counter
        session = self.watched
        timer = session.timer

        @functools.wraps(orig)
        def backward(*args: Any, **kwargs: Any) -> Any:
            phase = timer.phase
            timer.phase = PHASE_BACKWARD
            clock = session.device_timer  # GPU runs: mark the phase on the device's stream
            if clock is not None and clock.timing:
                clock.mark(PHASE_BACKWARD)
            t0 = perf()
            try:
                result = orig(*args, **kwargs)
            finally:
                timer.phase = phase
                if clock is not None and clock.timing:
                    clock.mark(phase)
            try:
                session.record_backward(perf() - t0)
            except Exception as exc:
                probe.fail("backward", exc)
            return result

        return backward


def _on_stack(frame: FrameType) -> bool:
    """Whether ``frame`` is still running (one of the current thread's callers). A step that
    raised never ran its post hook: its frame is gone, and the next step is a step of its own."""
    current: FrameType | None = sys._getframe(2)
    while current is not None:
        if current is frame:
            return True
        current = current.f_back
    return False


#: ``torch.distributed.checkpoint.state_dict._init_optim_state``: creates a fresh optimizer's
#: state before a sharded checkpoint is loaded into it, by one ``step()`` with zero gradients and
#: every learning rate set to 0. That step trains nothing, so it is not counted.
_DCP_INIT = "_init_optim_state"
_DCP_FILE = "distributed/checkpoint/state_dict.py"


def _dcp_state_init(optimizer: Any, depth: int = 8) -> bool:
    """Whether this step is DCP's state initialisation (only asked while the optimizer has no
    state yet): every group's lr is 0 and ``_init_optim_state`` is among the callers."""
    import sys

    for group in optimizer.param_groups:
        if group.get("lr", 0) != 0:
            return False
    frame: FrameType | None = sys._getframe(2)
    while frame is not None and depth > 0:
        code = frame.f_code
        if code.co_name == _DCP_INIT and code.co_filename.replace("\\", "/").endswith(_DCP_FILE):
            return True
        frame = frame.f_back
        depth -= 1
    return False
