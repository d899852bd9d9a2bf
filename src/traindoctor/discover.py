"""The one discovery rule shared by rules, their runtime monitors and the runtime probes.

Adding a rule, a monitor or a probe means adding a class to a module, nothing else: the module's
own classes of the wanted kind are found by :func:`classes_defined_in`.
"""

from __future__ import annotations

from types import ModuleType
from typing import TypeVar

T = TypeVar("T")


def classes_defined_in(module: ModuleType, base: type[T]) -> list[type[T]]:
    """Subclasses of ``base`` that ``module`` itself defines (not ones it merely imports)."""
    name = module.__name__
    return [
        obj
        for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, base) and obj is not base and obj.__module__ == name
    ]
