"""Recipes: the right training configuration as one-line functions.

Each function is what a traindoctor finding's "Use instead" recommends, built from standard
PyTorch pieces so that it computes exactly what the same code written by hand would. Importing
a recipe imports torch (``import traindoctor`` alone does not). See ``docs/recipes.md``.

The names are loaded on first use (PEP 562): a watched run asks for one recipe when it words a
finding's fix, and should not pay for importing the other modules.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Each public name and the module that defines it.
_HOMES = {
    "AmpSettings": "amp",
    "autocast_settings": "amp",
    "convert_batchnorm": "norm",
    "effective_batch": "optim",
    "loader_kwargs": "data",
    "param_groups": "optim",
    "scale_lr": "optim",
    "seed_everything": "data",
    "warmup_schedule": "optim",
    "worker_init_fn": "data",
}

__all__ = [
    "AmpSettings",
    "autocast_settings",
    "convert_batchnorm",
    "effective_batch",
    "loader_kwargs",
    "param_groups",
    "scale_lr",
    "seed_everything",
    "warmup_schedule",
    "worker_init_fn",
]  # the keys of _HOMES (tests/recipes/test_imports.py checks they agree)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
