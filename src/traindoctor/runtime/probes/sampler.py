"""Sampler probe: ``DistributedSampler`` construction, iteration and ``set_epoch``.

``DistributedSampler.__iter__`` runs once per epoch of its DataLoader (in the main process, also
with workers), so the epoch value it shuffles with is visible at that moment without touching
the sampler: monitors read ``sampler.epoch`` and ``sampler.shuffle``. Class-level patches only;
the sampler object is never modified. Custom samplers that re-implement ``__iter__`` without
calling ``DistributedSampler.__iter__`` are not seen.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.live import user_site
from traindoctor.runtime.probes.base import Probe

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session


class SamplerProbe(Probe):
    """Reports DistributedSampler construction, iteration and ``set_epoch`` calls."""

    name = "sampler"
    order = 80

    def install(self, session: Session) -> None:
        super().install(session)
        from torch.utils.data.distributed import DistributedSampler

        self.patch(DistributedSampler, "__init__", self._wrap_init)
        self.patch(DistributedSampler, "__iter__", self._wrap_iter)
        self.patch(DistributedSampler, "set_epoch", self._wrap_set_epoch)

    def _wrap_init(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        @functools.wraps(original)
        def __init__(sampler: Any, *args: Any, **kwargs: Any) -> None:
            original(sampler, *args, **kwargs)
            try:
                probe.emit("on_sampler_created", sampler, site=user_site(2))
            except Exception as exc:  # fail-open
                probe.fail("DistributedSampler.__init__", exc)

        return __init__

    def _wrap_iter(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        @functools.wraps(original)
        def __iter__(sampler: Any) -> Any:
            try:
                probe.emit("on_sampler_iter", sampler)
            except Exception as exc:  # fail-open
                probe.fail("DistributedSampler.__iter__", exc)
            return original(sampler)

        return __iter__

    def _wrap_set_epoch(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        @functools.wraps(original)
        def set_epoch(sampler: Any, epoch: int) -> Any:
            result = original(sampler, epoch)
            try:
                probe.emit("on_sampler_set_epoch", sampler, epoch)
            except Exception as exc:  # fail-open
                probe.fail("DistributedSampler.set_epoch", exc)
            return result

        return set_epoch
