"""Monitor discovery: the runtime halves of rules, found in the same modules as the rules.

A monitor is a :class:`~traindoctor.runtime.events.Monitor` subclass defined in a rule module
(``rules/<topic>/tdNNN_*.py``) whose ``rule`` attribute is that module's rule class. This module
walks the same modules as :mod:`traindoctor.registry` and keeps the monitors whose code is enabled.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from traindoctor.discover import classes_defined_in
from traindoctor.registry import iter_rule_modules
from traindoctor.runtime.events import Monitor


def _module_monitors(modname: str) -> list[type[Monitor]]:
    module = importlib.import_module(modname)
    return [m for m in classes_defined_in(module, Monitor) if getattr(m, "rule", None) is not None]


def all_monitors(enabled_codes: Iterable[str] | None = None) -> list[type[Monitor]]:
    """Monitor classes sorted by rule code, then class name.

    ``enabled_codes`` limits the result to those codes (``None``: every monitor).
    """
    wanted = None if enabled_codes is None else set(enabled_codes)
    found: list[type[Monitor]] = []
    for modname in sorted(iter_rule_modules()):
        for cls in _module_monitors(modname):
            if wanted is None or cls.rule.code in wanted:
                found.append(cls)
    found.sort(key=lambda cls: (cls.rule.code, cls.__name__))
    return found
