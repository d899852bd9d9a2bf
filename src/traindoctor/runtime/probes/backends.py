"""Backend-flags probe: ``torch.backends.cudnn.benchmark`` and ``.deterministic``.

The flags are ``ContextProp`` descriptors on the ``CudnnModule`` class; the probe swaps each for
a subclass instance whose setter calls the original setter first and then emits
``on_backend_flags(flags, site)`` with the user line of the assignment. Reading a flag goes
through unchanged. At install the current values are emitted once with ``site=None``, so a flag
set before the watch started is known too. ``torch.backends.cudnn.flags(...)`` (a context manager
that sets the flags in C++) is not observed.
"""

from __future__ import annotations

from typing import Any

from traindoctor.runtime.live import user_site
from traindoctor.runtime.probes.base import Probe

FLAGS = ("benchmark", "deterministic")


class BackendsProbe(Probe):
    """Reports cudnn ``benchmark``/``deterministic`` assignments."""

    name = "backends"
    order = 90

    def install(self, session: Any) -> None:
        super().install(session)
        import torch.backends
        import torch.backends.cudnn as cudnn

        self._cudnn = cudnn
        owner = type(cudnn)
        base = torch.backends.ContextProp
        probe = self
        for flag in FLAGS:
            descriptor = vars(owner).get(flag)
            if not isinstance(descriptor, base):
                continue

            class Watched(base):  # type: ignore[misc, valid-type]
                """The original flag descriptor, reporting assignments."""

                def __set__(self, obj: Any, val: Any, _flag: str = flag) -> None:
                    super().__set__(obj, val)
                    try:
                        probe._emit_flags(user_site(2))
                    except Exception as exc:  # fail-open
                        probe.fail(f"cudnn.{_flag}", exc)

            watched = Watched(descriptor.getter, descriptor.setter)
            self.patch(owner, flag, lambda _current, _w=watched: _w)
        self._emit_flags(None)

    def current_flags(self) -> dict[str, bool]:
        return {flag: bool(getattr(self._cudnn, flag)) for flag in FLAGS}

    def _emit_flags(self, site: Any) -> None:
        if self.session is not None:
            self.session.emit("on_backend_flags", self.current_flags(), site=site)
