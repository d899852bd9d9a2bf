"""The error every command raises for a command line it cannot use.

``traindoctor check``, ``run`` and ``tune SCRIPT`` each catch it and print its message in one line
(no traceback), then exit with status 2. Importable from any layer.
"""

from __future__ import annotations


class UsageError(ValueError):
    """A command line (or the configuration it names) that cannot be used; the message says why."""
