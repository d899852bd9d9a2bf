"""Model-roots probe: which top-level ``nn.Module``\\ s the run trains or evaluates.

Installs global forward pre/post hooks only during warm-up (until a few optimizer steps have
completed) and records each module whose forward starts while no other module's forward is
running: the root (``model``, a DDP wrapper, ...). Global module hooks put every module call on
torch's slow path, so they are removed as soon as the roots are known.

Each root's *class* also gets a timing ``__call__`` (the class attribute, restored on uninstall;
nothing is set on the user's module objects): the outermost model call is the profile's
``forward`` row. Nested calls (a root used inside another root) pass straight through. The same
wrapper tells the session when a root is called in a (train mode, grad mode) other than last
time, so that the module probe watches the layers of an evaluation that starts.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.probes.base import Probe

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session

#: Remove the global hooks after this many optimizer steps (or this many root forwards).
WATCH_STEPS = 2
MAX_ROOT_CALLS = 64


class ModelRootsProbe(Probe):
    """Finds root modules during warm-up; feeds ``Session.models`` and ``on_model_found``."""

    name = "model-roots"
    order = 30

    def __init__(self) -> None:
        super().__init__()
        self._depth = 0
        self._root_calls = 0
        self._done = False
        self._timed: set[type] = set()
        self._forward_depth = 0
        #: (train mode, grad mode) of each root's last call, by ``id()``.
        self._root_modes: dict[int, tuple[bool, bool]] = {}

    def install(self, session: Session) -> None:
        super().install(session)
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )

        self.keep_handle(register_module_forward_pre_hook(self._enter))
        self.keep_handle(register_module_forward_hook(self._exit, always_call=True))
        session.add_step_listener(self._on_step)
        session.add_batch_observer(self._on_batch)
        import torch

        self._is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
        self._is_grad_enabled = torch.is_grad_enabled

    def _enter(self, module: Any, args: Any) -> None:
        try:
            if self._depth == 0 and not self._done:
                self._root_calls += 1
                self.watched.record_model(module)
                cls = type(module)
                if cls not in self._timed:
                    self._timed.add(cls)
                    self.patch(cls, "__call__", self._wrap_call)
                    self.watched.timer.forward_seen = True
                if self._root_calls >= MAX_ROOT_CALLS:
                    self._done = True
            self._depth += 1
        except Exception as exc:
            self.fail("forward pre-hook", exc)
        return None

    def _wrap_call(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        from traindoctor.runtime.phases import PHASE_FORWARD

        probe = self
        session = self.watched
        timer = session.timer
        perf = time.perf_counter
        compiling = self._is_compiling
        grad_enabled = self._is_grad_enabled
        modes = self._root_modes

        @functools.wraps(orig)
        def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
            if probe._forward_depth or compiling():
                return orig(module, *args, **kwargs)
            try:
                mode = (module.training, grad_enabled())
                last = modes.get(id(module))
                if last != mode:
                    modes[id(module)] = mode
                    if last is not None:  # evaluation starts or ends: watch the layers
                        session.root_mode_changed()
            except Exception as exc:  # fail-open
                probe.fail("root mode", exc)
            probe._forward_depth = 1
            phase = timer.phase
            timer.phase = PHASE_FORWARD
            clock = session.device_timer  # GPU runs: mark the phase on the device's stream
            if clock is not None and clock.timing:
                clock.mark(PHASE_FORWARD)
            t0 = perf()
            try:
                return orig(module, *args, **kwargs)
            finally:
                timer.forward_total += perf() - t0
                timer.forward_seen = True
                timer.phase = phase
                probe._forward_depth = 0
                if clock is not None and clock.timing:
                    clock.mark(phase)

        return __call__

    def _exit(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(self._depth - 1, 0)
        return None

    def _on_batch(self, info: Any, batch: Any) -> None:
        # Outside any forward: a safe moment to drop the hooks once enough roots were seen.
        if self._done and self._depth == 0 and self._handles:
            self._release()

    def _on_step(self, record: Any) -> None:
        if record.index >= WATCH_STEPS:
            self._done = True
            if self._depth == 0:
                self._release()

    def _release(self) -> None:
        """Drop the global hooks (the root modules are known), and stop listening to batches
        and steps: from here on only the timing ``__call__`` of the roots' classes remains."""
        while self._handles:
            try:
                self._handles.pop().remove()
            except Exception:  # pragma: no cover
                pass
        if self.session is not None:
            self.session.remove_step_listener(self._on_step)
            self.session.remove_batch_observer(self._on_batch)
