"""A one-line progress bar on a terminal, plain lines otherwise (CI logs, pipes).

Used by ``traindoctor tune SCRIPT`` (one tick per trial) and ``verify-resume`` (its three runs).
Writes to stderr so that ``--output-format json`` on stdout stays clean.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

BAR_WIDTH = 24


class Progress:
    """``start(label)`` before a unit of work, ``done(result)`` after it; ``total`` may grow."""

    def __init__(self, prefix: str, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.prefix = prefix
        self.total = max(total, 1)
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.count = 0
        self.label = ""
        self.started = time.perf_counter()
        try:
            self.tty = bool(self.stream.isatty())
        except (AttributeError, ValueError):
            self.tty = False

    def _bar(self, count: int) -> str:
        filled = int(BAR_WIDTH * min(count, self.total) / self.total)
        return "[" + "#" * filled + "." * (BAR_WIDTH - filled) + "]"

    def _write(self, text: str) -> None:
        if not self.enabled:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream must not stop the work
            self.enabled = False

    def start(self, label: str) -> None:
        self.label = label
        if self.tty:
            elapsed = time.perf_counter() - self.started
            line = f"{self.prefix} {self._bar(self.count)} {self.count + 1}/{self.total} {label} ({elapsed:.0f} s)"
            self._write("\r\033[K" + line[:200])

    def done(self, result: str = "") -> None:
        self.count += 1
        self.total = max(self.total, self.count)
        if self.tty:
            return
        tail = f": {result}" if result else ""
        self._write(f"{self.prefix} [{self.count}/{self.total}] {self.label}{tail}\n")

    def skip(self, units: int) -> None:
        """Planned units that are not needed (the total stays as it was set)."""
        self.count = min(self.count + max(units, 0), self.total)

    def remaining(self, units: int) -> None:
        """Units still to come (the total is re-estimated as the work goes)."""
        self.total = max(self.count + max(units, 0), 1)

    def close(self) -> None:
        if self.tty:
            self._write("\r\033[K")
