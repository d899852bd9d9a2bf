"""traindoctor: find, explain, measure and fix silent PyTorch training configuration mistakes.

Importing this package never imports torch; the runtime features import it when used.
"""

from __future__ import annotations

from typing import Any

from traindoctor.finding import Edit, Finding, Fix, Location, Origin, Severity
from traindoctor.version import __version__

__all__ = ["Edit", "Finding", "Fix", "Location", "Origin", "Severity", "__version__", "watch"]


def __getattr__(name: str) -> Any:
    # Lazy: ``traindoctor.watch`` pulls in the runtime (and torch) only when used.
    if name == "watch":
        from traindoctor.doctor.watch import watch

        return watch
    raise AttributeError(name)
