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
and marks the training thread's phase for the host-work sampler. The wrapper and both hooks also
read the clock where they are entered and where they return: the rest of their time is the
doctor's own (:mod:`traindoctor.runtime.step_timer`). torch's step wrapper runs outside the hooks
(a profiler ``record_function`` around them) and belongs to the optimizer row: the class of each
optimizer built during the watch gets a timing ``step`` around torch's (the class attribute,
restored on uninstall, built before any LR scheduler wraps the instance's ``step``), which reads
the clock when the call enters and leaves. An optimizer built before the watch started gets it at
its first step (its later steps are timed, unless an LR scheduler wrapped the instance's ``step``
already); for the steps that are not, the wrapper's cost is calibrated once, on an empty
optimizer with the hooks kept out (:func:`step_wrapper_cost`).
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
        #: Optimizer classes whose ``step`` is timed, and the clock when the outermost timed
        #: ``step`` call entered / when its post-hook's work was done (None outside).
        self._timed: set[type] = set()
        #: While the empty optimizer's step is calibrated (the hooks stay out of it), and once done.
        self._calibrating = False
        self._calibrated = False
        self._step_entered: float | None = None
        self._hooks_left: float | None = None

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
            if probe._calibrating:
                return
            try:
                session.note_optimizer_site(optimizer, user_site(2))
                probe._time_steps(type(optimizer))
            except Exception as exc:
                probe.fail("Optimizer.__init__", exc)

        return __init__

    def _time_steps(self, cls: type) -> None:
        """Put a timing ``step`` on ``cls`` once torch's wrapper is in place (at construction, or
        at the first step of an optimizer built before the watch: then from its next step on,
        unless an LR scheduler already wrapped the instance's ``step``)."""
        if cls not in self._timed and getattr(getattr(cls, "step", None), "hooked", False):
            self._timed.add(cls)
            self.patch(cls, "step", self._wrap_step)

    def _calibrate(self) -> None:
        """Calibrate torch's step wrapper once (:func:`step_wrapper_cost`), for the steps of an
        optimizer built before the watch: the hooks stay out of the empty optimizer's steps."""
        if self._calibrated:
            return
        self._calibrated = self._calibrating = True
        try:
            self.watched.timer.step_wrapper_s = step_wrapper_cost()
        except Exception as exc:  # fail-open: the wrapper's cost stays in other host work
            self.fail("step wrapper calibration", exc)
        finally:
            self._calibrating = False

    def _wrap_step(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        """A timing ``step`` around torch's wrapper (it keeps ``hooked``: torch does not wrap it
        again). The time from its entry to the pre-hook, and from the post-hook's end to its
        return, is torch's wrapper: the optimizer row's."""
        probe = self
        perf = time.perf_counter
        timer = self.watched.timer
        import torch

        compiling = getattr(torch.compiler, "is_compiling", lambda: False)

        @functools.wraps(orig)
        def step(optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            if probe._step_entered is not None or compiling():
                return orig(optimizer, *args, **kwargs)  # a nested super().step(), or traced
            probe._step_entered = perf()
            try:
                return orig(optimizer, *args, **kwargs)
            finally:
                left = probe._hooks_left
                probe._step_entered = probe._hooks_left = None
                if left is not None:
                    timer.add_optimizer_tail(perf() - left)

        return step

    def _pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        entered = time.perf_counter()
        if self._calibrating:
            return None
        try:
            key = id(optimizer)
            outer = self._outer.get(key)
            if outer is not None and _on_stack(outer):
                return None  # ``super().step()`` inside the step being recorded
            if not optimizer.state and _dcp_state_init(optimizer):
                self._not_training.add(key)
                return None
            self._outer[key] = sys._getframe(1)  # torch's wrapper, which calls the post hook too
            if type(optimizer) not in self._timed:
                self._time_steps(type(optimizer))  # built before the watch started
                self._calibrate()  # its first steps (and any a scheduler wrapped) are not timed
            began = self._step_entered
            self.watched.record_optimizer_pre(optimizer, entered, None if began is None else entered - began)
        except Exception as exc:
            self.fail("optimizer pre-step", exc)
        return None

    def _post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        entered = time.perf_counter()
        if self._calibrating:
            return
        if self._not_training and id(optimizer) in self._not_training:
            self._not_training.discard(id(optimizer))
            return
        outer = self._outer.get(id(optimizer))
        if outer is not None:
            if outer is not sys._getframe(1):
                return  # the end of a nested step; the outer one ends later
            del self._outer[id(optimizer)]
        try:
            done = self.watched.record_optimizer_post(optimizer, entered)
            if self._step_entered is not None:
                self._hooks_left = done
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
            entered = perf()
            phase = timer.phase
            timer.phase = PHASE_BACKWARD
            clock = session.device_timer  # GPU runs: mark the phase on the device's stream
            if clock is not None and clock.timing:
                clock.mark(PHASE_BACKWARD)
            inner = timer.self_total
            t0 = perf()
            try:
                result = orig(*args, **kwargs)
            finally:
                t1 = perf()
                timer.phase = phase
                if clock is not None and clock.timing:
                    clock.mark(phase)
            try:
                session.record_backward(t1 - t0 - (timer.self_total - inner))
            except Exception as exc:
                probe.fail("backward", exc)
            timer.self_total += t0 - entered + perf() - t1
            return result

        return backward


#: Calls of the empty optimizer's step timed by :func:`step_wrapper_cost` (the median is kept).
CALIBRATION_CALLS = 15


def step_wrapper_cost() -> float:
    """Seconds torch's ``Optimizer.step`` wrapper takes around an empty step (its profiler
    ``record_function``, the hook loops): the median of :data:`CALIBRATION_CALLS` calls on an
    optimizer of one parameter whose ``step`` does nothing, in a tight loop (a lower bound: between
    a step's other work the same calls run slower)."""
    import torch
    from torch.optim import Optimizer

    class _Empty(Optimizer):
        def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]  # torch's overloads
            return None

    opt = _Empty([torch.zeros(1, requires_grad=True)], {})
    perf = time.perf_counter
    times = []
    for _ in range(CALIBRATION_CALLS):
        t0 = perf()
        opt.step()
        times.append(perf() - t0)
    times.sort()
    return times[len(times) // 2]


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
