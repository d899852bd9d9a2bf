"""The recipes import torch only when they themselves are imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")


def imported_after(statement: str) -> bool:
    code = f"import sys; {statement}; print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    return out.stdout.strip() == "True"


def test_import_traindoctor_does_not_import_torch_or_recipes() -> None:
    assert not imported_after("import traindoctor; assert 'traindoctor.recipes' not in sys.modules")


def test_recipes_export_the_announced_names() -> None:
    import traindoctor.recipes as recipes

    assert sorted(recipes.__all__) == [
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
    for name in recipes.__all__:
        assert getattr(recipes, name).__doc__, name


def test_one_recipe_imports_only_its_own_module() -> None:
    """A watched run words TD204's fix with ``param_groups``: that must not load the AMP, data
    and norm recipes too (the package resolves its names on first use)."""
    statement = (
        "from traindoctor.recipes import param_groups; "
        "loaded = sorted(m for m in sys.modules if m.startswith('traindoctor.recipes.')); "
        "assert loaded == ['traindoctor.recipes.optim'], loaded"
    )
    assert imported_after(statement)


def test_unknown_recipe_is_an_attribute_error() -> None:
    import pytest

    import traindoctor.recipes as recipes

    with pytest.raises(AttributeError, match="no attribute 'no_such_recipe'"):
        recipes.no_such_recipe
    assert "param_groups" in dir(recipes)
