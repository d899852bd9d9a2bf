"""Mixed-precision probe: autocast regions, GradScaler calls and gradient clipping.

Patches (all restored on uninstall):

* ``torch.amp.autocast_mode.autocast.__enter__`` (``torch.autocast``, ``torch.cuda.amp.autocast``
  and ``torch.cpu.amp.autocast`` all end up there): emits ``on_autocast_enter(device, dtype)``
  for enabled regions, after the region is set up;
* ``torch.amp.GradScaler.__init__/scale/unscale_/step/update`` (``torch.cuda.amp.GradScaler``
  subclasses it): ``on_scaler_created`` and ``on_scaler_call(scaler, method, optimizer)``, emitted
  before the call; the ``unscale_`` that ``step`` performs internally is not reported;
* ``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_`` (both the ``torch.nn.utils`` and the
  ``torch.nn.utils.clip_grad`` attribute): ``on_clip_grad(kind, parameters)`` before clipping. A
  generator of parameters is materialised to a list once and that list is passed on, which is
  what the clipping functions do themselves, so results are identical.

A name imported with ``from torch.nn.utils import clip_grad_norm_`` *before* the watch started is
not seen (``traindoctor run`` installs probes before the script runs, so it sees everything).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.live import user_site
from traindoctor.runtime.probes.base import Probe

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session


class AmpProbe(Probe):
    """Reports autocast regions, GradScaler use and gradient clipping."""

    name = "amp"
    order = 50

    def install(self, session: Session) -> None:
        super().install(session)
        import torch
        import torch.nn.utils as nn_utils
        import torch.nn.utils.clip_grad as clip_grad
        from torch.amp import autocast_mode, grad_scaler

        self._is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
        self._in_scaler_step = 0
        self.patch(autocast_mode.autocast, "__enter__", self._wrap_autocast_enter)
        scaler_cls = grad_scaler.GradScaler
        self.patch(scaler_cls, "__init__", self._wrap_scaler_init)
        for method in ("scale", "unscale_", "step", "update"):
            self.patch(scaler_cls, method, functools.partial(self._wrap_scaler_call, method=method))
        for owner in (nn_utils, clip_grad):
            for attr, kind in (("clip_grad_norm_", "norm"), ("clip_grad_value_", "value")):
                if hasattr(owner, attr):
                    self.patch(owner, attr, functools.partial(self._wrap_clip, kind=kind))

    # ---------------------------------------------------------------- autocast
    def _wrap_autocast_enter(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        @functools.wraps(original)
        def __enter__(region: Any) -> Any:
            result = original(region)
            if not probe._is_compiling():
                try:
                    if getattr(region, "_enabled", False):
                        probe.emit("on_autocast_enter", str(region.device), region.fast_dtype)
                except Exception as exc:  # fail-open
                    probe.fail("autocast", exc)
            return result

        return __enter__

    # ---------------------------------------------------------------- GradScaler
    def _wrap_scaler_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        @functools.wraps(original)
        def __init__(scaler: Any, *args: Any, **kwargs: Any) -> None:
            original(scaler, *args, **kwargs)
            try:
                probe.emit("on_scaler_created", scaler, site=user_site(2))
            except Exception as exc:  # fail-open
                probe.fail("GradScaler.__init__", exc)

        return __init__

    def _wrap_scaler_call(self, original: Callable[..., Any], *, method: str) -> Callable[..., Any]:
        probe = self

        @functools.wraps(original)
        def call(scaler: Any, *args: Any, **kwargs: Any) -> Any:
            nested = method == "unscale_" and probe._in_scaler_step > 0
            if not nested and not probe._is_compiling():
                try:
                    optimizer = None
                    if method in ("unscale_", "step"):
                        optimizer = args[0] if args else kwargs.get("optimizer")
                    probe.emit("on_scaler_call", scaler, method, optimizer)
                except Exception as exc:  # fail-open
                    probe.fail(f"GradScaler.{method}", exc)
            if method != "step":
                return original(scaler, *args, **kwargs)
            probe._in_scaler_step += 1
            try:
                return original(scaler, *args, **kwargs)
            finally:
                probe._in_scaler_step -= 1

        return call

    # ---------------------------------------------------------------- clipping
    def _wrap_clip(self, original: Callable[..., Any], *, kind: str) -> Callable[..., Any]:
        probe = self

        @functools.wraps(original)
        def clip(parameters: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                import torch

                if not isinstance(parameters, torch.Tensor):
                    parameters = list(parameters)
                probe.emit("on_clip_grad", kind, parameters)
            except Exception as exc:  # fail-open
                probe.fail(f"clip_grad_{kind}_", exc)
            return original(parameters, *args, **kwargs)

        return clip
