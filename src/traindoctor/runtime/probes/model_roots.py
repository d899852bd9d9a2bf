"""Model-roots probe: which top-level ``nn.Module``\\ s the run trains or evaluates.

Installs global forward pre/post hooks only during warm-up (until a few optimizer steps have
completed) and looks at each module whose forward runs while no other module's forward is
running (``model``, a DDP wrapper, a loss, a transform). Such a call is a *root* by its training
use: the module has parameters, and its output feeds ``backward()`` (a tensor that requires
grad) or an optimizer holds its parameters (checked again at each optimizer step, for a model
first called under ``no_grad``). Calls made while a ``DataLoader``'s ``next()`` runs are data
loading (torchvision's ``Normalize``/``RandomCrop`` per sample in a main-process loader), never
forward, and do not use up the ``MAX_ROOT_CALLS`` budget; parameter-free modules (a loss, an
activation) are the loop's own work. Global module hooks put every module call on torch's slow
path, so they are removed as soon as the roots are known.

Each root's *class* also gets a timing ``__call__`` (the class attribute, restored on uninstall;
nothing is set on the user's module objects): the outermost model call is the profile's
``forward`` row. Nested calls (a root used inside another root) pass straight through. The same
wrapper tells the session when a root is called in a (train mode, grad mode) other than last
time, so that the module probe watches the layers of an evaluation that starts. Its own work
around the timed call is the doctor's (:mod:`traindoctor.runtime.step_timer`), and the doctor's
work nested inside the call (a wrapper the model calls) is left out of the forward row.

The global hooks are dropped after ``WATCH_STEPS`` steps, or ``MAX_ROOT_CALLS`` root calls,
at the next batch or step, or, in a loop that updates its parameters itself (no optimizer), at
the next ``backward()`` (the session's progress listeners).
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.phases import PHASE_DATA
from traindoctor.runtime.probes.base import Probe

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session

#: Remove the global hooks after this many optimizer steps (or this many root forwards).
WATCH_STEPS = 2
MAX_ROOT_CALLS = 64
#: Top-level calls under ``no_grad`` kept until an optimizer step says whether they are models.
MAX_PENDING = 16


def feeds_backward(output: Any, depth: int = 2) -> bool:
    """Whether a forward's output holds a tensor that requires grad (a tensor, or one inside a
    tuple, list or mapping, ``depth`` levels down; the first 8 items of each)."""
    import torch

    if isinstance(output, torch.Tensor):
        return bool(output.requires_grad)
    if depth <= 0:
        return False
    if isinstance(output, Mapping):
        items = list(output.values())[:8]
    elif isinstance(output, (tuple, list)):
        items = list(output[:8])
    else:
        return False
    return any(feeds_backward(item, depth - 1) for item in items)


def _has_parameters(module: Any) -> bool:
    return next(iter(module.parameters()), None) is not None


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
        #: The outermost module call in progress, when it is a candidate root.
        self._outer: Any = None
        #: Candidates first called under ``no_grad``, by ``id()``: decided at an optimizer step.
        self._pending: dict[int, weakref.ReferenceType[Any]] = {}
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
        session.add_progress_listener(self._on_progress)
        session.add_batch_observer(self._on_batch)
        import torch

        self._is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
        self._is_grad_enabled = torch.is_grad_enabled

    def _enter(self, module: Any, args: Any) -> None:
        try:
            if self._depth == 0 and not self._done and self.watched.timer.phase != PHASE_DATA:
                self._outer = module
            self._depth += 1
        except Exception as exc:
            self.fail("forward pre-hook", exc)
        return None

    def _exit(self, module: Any, args: Any, output: Any) -> None:
        self._depth = max(self._depth - 1, 0)
        if self._depth or self._outer is not module:
            return None
        self._outer = None
        try:
            self._consider(module, output)
        except Exception as exc:
            self.fail("forward hook", exc)
        return None

    def _consider(self, module: Any, output: Any) -> None:
        """One top-level call outside data loading: a root when it trains (see the module doc)."""
        self._root_calls += 1
        if self._root_calls >= MAX_ROOT_CALLS:
            self._done = True
        session = self.watched
        if module in session.models or not _has_parameters(module):
            return
        if feeds_backward(output) or self._held_by_optimizer(module):
            self._adopt(module)
        elif len(self._pending) < MAX_PENDING:
            self._pending[id(module)] = weakref.ref(module)

    def _held_by_optimizer(self, module: Any) -> bool:
        held = {id(p) for opt in self.watched.optimizers for g in opt.param_groups for p in g["params"]}
        return bool(held) and any(id(p) in held for p in module.parameters())

    def _adopt(self, module: Any) -> None:
        """Record ``module`` as a root and time its class's calls as the forward row."""
        self._pending.pop(id(module), None)
        self.watched.record_model(module)
        cls = type(module)
        if cls not in self._timed:
            self._timed.add(cls)
            self.patch(cls, "__call__", self._wrap_call)
            self.watched.timer.forward_seen = True

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
            entered = perf()
            if probe._forward_depth or timer.phase == PHASE_DATA or compiling():
                return orig(module, *args, **kwargs)  # nested, data loading, or traced
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
            inner = timer.self_total
            t0 = perf()
            try:
                return orig(module, *args, **kwargs)
            finally:
                t1 = perf()
                timer.forward_total += t1 - t0 - (timer.self_total - inner)
                timer.forward_seen = True
                timer.phase = phase
                probe._forward_depth = 0
                if clock is not None and clock.timing:
                    clock.mark(phase)
                timer.self_total += t0 - entered + perf() - t1

        return __call__

    def _on_batch(self, info: Any, batch: Any) -> None:
        # Outside any forward: a safe moment to drop the hooks once enough roots were seen.
        if self._done and self._depth == 0 and self._handles:
            self._release()

    def _on_progress(self, steps: int) -> None:
        """A loop without an optimizer: drop the hooks by its ``backward()`` calls."""
        if steps >= WATCH_STEPS and self._depth == 0:
            self._done = True
            self._release()

    def _on_step(self, record: Any) -> None:
        try:
            for ref in list(self._pending.values()):
                module = ref()
                if module is not None and self._held_by_optimizer(module):
                    self._adopt(module)
        except Exception as exc:  # fail-open
            self.fail("pending roots", exc)
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
            self.session.remove_progress_listener(self._on_progress)
            self.session.remove_batch_observer(self._on_batch)
