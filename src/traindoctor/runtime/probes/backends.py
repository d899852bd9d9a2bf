"""Backend-flags probe: ``torch.backends.cudnn.benchmark``, ``.deterministic`` and ``.enabled``.

The flags are ``ContextProp`` descriptors on the ``CudnnModule`` class; the probe swaps each for
a subclass instance whose setter calls the original setter first and then emits
``on_backend_flags(flags, site)`` with the user line of the assignment. Reading a flag goes
through unchanged. At install the current values are emitted once with ``site=None``, so a flag
set before the watch started is known too. ``torch.backends.cudnn.flags(...)`` (a context manager
that sets the flags in C++) is not observed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.live import Site, user_site
from traindoctor.runtime.probes.base import Probe

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session

FLAGS = ("benchmark", "deterministic", "enabled")


class BackendsProbe(Probe):
    """Reports cudnn ``benchmark``/``deterministic``/``enabled`` assignments."""

    name = "backends"
    order = 90

    def install(self, session: Session) -> None:
        super().install(session)
        import torch.backends.cudnn as cudnn
        from torch.backends import ContextProp

        self._cudnn = cudnn
        owner = type(cudnn)
        probe = self
        for flag in FLAGS:
            descriptor = vars(owner).get(flag)
            if not isinstance(descriptor, ContextProp):
                continue

            class Watched(ContextProp):
                """The original flag descriptor, reporting assignments."""

                def __set__(self, obj: Any, val: Any, _flag: str = flag) -> None:
                    super().__set__(obj, val)  # type: ignore[no-untyped-call]  # torch's ContextProp is unannotated
                    try:
                        probe._emit_flags(user_site(2))
                    except Exception as exc:  # fail-open
                        probe.fail(f"cudnn.{_flag}", exc)

            watched = Watched(descriptor.getter, descriptor.setter)  # type: ignore[no-untyped-call]  # torch's ContextProp is unannotated
            self.patch(owner, flag, _always(watched))
        self._emit_flags(None)

    def current_flags(self) -> dict[str, bool]:
        return {flag: bool(getattr(self._cudnn, flag)) for flag in FLAGS}

    def _emit_flags(self, site: Site | None) -> None:
        self.emit("on_backend_flags", self.current_flags(), site=site)


def _always(value: object) -> Callable[[object], object]:
    """A ``make`` for :meth:`Probe.patch` that puts ``value`` in place of the current one."""
    return lambda _current: value
