"""Warnings probe: warnings raised under a probe's wrapper keep the user's line.

Torch warns with ``stacklevel=2`` to blame the caller of the function that warns
(``GradScaler("cuda")`` on a machine without CUDA, deprecations, ...). When a probe wraps that
function, the caller is the probe's wrapper, so without this probe the user would see
``traindoctor/runtime/probes/amp.py`` instead of their own line, and ``-W`` filters by module
would stop matching. Python 3.11 has no ``skip_file_prefixes``, so while the doctor watches,
``warnings.warn`` is wrapped (restored on uninstall): it moves ``stacklevel`` past any probe frame
at the blamed position, then calls the original ``warnings.warn``. Registries, filters,
``showwarning`` and "once"/"default" de-duplication are the original ones, applied to the
frame the user would have seen without the doctor.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.probes.base import Probe

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session


def _probe_dir() -> str:
    return os.path.dirname(os.path.abspath(__file__)) + os.sep


class WarningsProbe(Probe):
    """Keeps warnings' locations where they would be without the probes' wrapper frames."""

    name = "warnings"
    order = 0

    def install(self, session: Session) -> None:
        super().install(session)
        import warnings

        self.patch(warnings, "warn", self._wrap_warn)

    def _wrap_warn(self, orig: Callable[..., None]) -> Callable[..., None]:
        probes = _probe_dir()
        getframe = sys._getframe

        @functools.wraps(orig)
        def warn(message: Any, category: Any = None, stacklevel: int = 1, source: Any = None, **kwargs: Any) -> None:
            if type(stacklevel) is not int:  # let warnings.warn reject it as it would
                return orig(message, category, stacklevel, source, **kwargs)
            extra = 0
            try:
                frame: FrameType | None = getframe(max(stacklevel, 1))  # the frame warnings would blame
                while frame is not None and frame.f_code.co_filename.startswith(probes):
                    frame = frame.f_back
                    extra += 1
                del frame
            except ValueError:  # a stacklevel above the stack: warnings handles that itself
                extra = 0
            return orig(message, category, max(stacklevel, 1) + 1 + extra, source, **kwargs)

        return warn
