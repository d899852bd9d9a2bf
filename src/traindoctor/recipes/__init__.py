"""Recipes: the right training configuration as one-line functions.

Each function is what a traindoctor finding's "Use instead" recommends, built from standard
PyTorch pieces so that it computes exactly what the same code written by hand would. Importing
this package imports torch (``import traindoctor`` alone does not). See ``docs/recipes.md``.
"""

from __future__ import annotations

from traindoctor.recipes.amp import AmpSettings, autocast_settings
from traindoctor.recipes.data import loader_kwargs, seed_everything, worker_init_fn
from traindoctor.recipes.norm import convert_batchnorm
from traindoctor.recipes.optim import effective_batch, param_groups, scale_lr, warmup_schedule

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
]
