"""Checkpoint probe: ``torch.save`` calls and the LR schedulers that exist in the run.

``torch.save`` (the ``torch`` and ``torch.serialization`` attributes) is wrapped: the original
runs first with the very same arguments, so the file written is byte-for-byte what it would be
unwatched; only after it returned does the probe emit ``on_checkpoint_save(obj, path, site)``; the
site is the user line that put the saved object together (a helper that saves the object it was
handed reports its caller's line, as the checker does).
Monitors inspect ``obj`` in place (keys, types, tensor identity); nothing is copied or converted.
What the probe and its monitors do after the save returned (the user line, the checker's index
of the file that the checkpoint rules ask, the first time hundreds of milliseconds) is the
doctor's own time (:mod:`traindoctor.runtime.step_timer`), never the step's other host work.
Saves into unnamed in-memory buffers (``io.BytesIO``, used for deep copies) are emitted with
``path=None`` and monitors ignore them. Saves made by a framework's own checkpoint writer
(``accelerator.save_state``, the Hugging Face ``Trainer``'s checkpoints, Lightning's
``save_checkpoint``; see :mod:`traindoctor.runtime.framework_writers`) are not emitted: the framework
writes the rest of the state next to them.

LR schedulers are seen at construction (``LRScheduler.__init__`` and ``ReduceLROnPlateau.__init__``,
which does not call its base's ``__init__``): ``on_scheduler_created(scheduler, site)``.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.framework_writers import caller_is_framework_writer
from traindoctor.runtime.live import clear_save_cache, describe_path, handed_over_site, user_site
from traindoctor.runtime.probes.base import Probe

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session


class CheckpointProbe(Probe):
    """Reports ``torch.save`` calls and LR scheduler construction."""

    name = "checkpoint"
    order = 70

    def install(self, session: Session) -> None:
        super().install(session)
        import torch
        import torch.serialization as serialization
        from torch.optim import lr_scheduler

        self._saving = 0
        for owner in (torch, serialization):
            self.patch(owner, "save", self._wrap_save)
        for cls in (lr_scheduler.LRScheduler, lr_scheduler.ReduceLROnPlateau):
            if "__init__" in vars(cls):
                self.patch(cls, "__init__", self._wrap_scheduler_init)

    def _wrap_save(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        @functools.wraps(original)
        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            probe._saving += 1
            try:
                result = original(obj, f, *args, **kwargs)
            finally:
                probe._saving -= 1
            if probe._saving == 0:
                probe._after_save(obj, f)
            return result

        return save

    def _after_save(self, obj: Any, f: Any) -> None:
        """Emit the save (the caller of ``save`` is three frames up) and count the time it took
        as the doctor's own."""
        probe = self
        start = time.perf_counter()
        try:
            if not probe._framework_save(3):
                try:
                    site = handed_over_site(obj, 3)
                    probe.emit("on_checkpoint_save", obj, describe_path(f), site=site)
                except Exception as exc:  # fail-open
                    probe.fail("torch.save", exc)
                try:
                    if probe.session is not None:
                        clear_save_cache(probe.session)
                except Exception as exc:  # fail-open
                    probe.fail("torch.save cleanup", exc)
        finally:
            session = probe.session
            if session is not None:
                session.timer.self_total += time.perf_counter() - start

    def _wrap_scheduler_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        @functools.wraps(original)
        def __init__(scheduler: Any, *args: Any, **kwargs: Any) -> None:
            original(scheduler, *args, **kwargs)
            try:
                probe.emit("on_scheduler_created", scheduler, site=user_site(2))
            except Exception as exc:  # fail-open
                probe.fail("LRScheduler.__init__", exc)

        return __init__

    def _framework_save(self, depth: int = 2) -> bool:
        """True when a framework's own checkpoint writer called this save (fail-open: False)."""
        try:
            return caller_is_framework_writer(depth) is not None
        except Exception as exc:
            self.fail("framework checkpoint writer", exc)
            return False
