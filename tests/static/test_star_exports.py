"""Names a ``from utils import *`` of a project module brings in from the outside world.

Research code often imports ``torch`` once in ``utils.py`` and everything else with
``from utils import *``: ``torch.no_grad()`` in ``eval.py`` is still torch's, and rules that
read ``with torch.no_grad():`` must see it (a-PyTorch-Tutorial-to-Object-Detection's ``eval.py``,
pytorch-deeplab-xception's ``train.py`` through ``from modeling.deeplab import *``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traindoctor.check.cli import main as check_main

UTILS = "import torch\nimport torch.nn as nn\n\ndevice = torch.device('cpu')\n"
EVAL = """from utils import *


def evaluate(model, loader):
    model.eval()
    with torch.no_grad():
        for images, labels in loader:
            scores = model(images)
"""


def _check(root: Path, monkeypatch: pytest.MonkeyPatch, *paths: str) -> list[tuple[str, str, int]]:
    monkeypatch.chdir(root)
    check_main([*paths, "--no-cache", "--output-format", "json", "-o", "out.json", "--exit-zero"])
    return sorted((f["code"], f["filename"], f["location"]["row"]) for f in json.loads(Path("out.json").read_text()))


def test_torch_through_a_star_import_of_a_project_module_is_torch(tmp_path, monkeypatch):
    (tmp_path / "utils.py").write_text(UTILS)
    (tmp_path / "eval.py").write_text(EVAL)
    assert _check(tmp_path, monkeypatch, "eval.py") == []  # under no_grad: no TD702


def test_a_name_the_star_imported_module_defines_itself_is_not_the_outside_worlds(tmp_path, monkeypatch):
    # utils.py binds ``torch`` to its own object: nothing is assumed about it
    (tmp_path / "utils.py").write_text(
        "class _Fake:\n    def no_grad(self):\n        return open('x')\n\ntorch = _Fake()\n"
    )
    (tmp_path / "eval.py").write_text(EVAL)
    assert _check(tmp_path, monkeypatch, "eval.py") == [("TD702", "eval.py", 8)]


def test_star_exports_are_followed_through_another_star_import(tmp_path, monkeypatch):
    (tmp_path / "base.py").write_text(UTILS)
    (tmp_path / "utils.py").write_text("from base import *\n")
    (tmp_path / "eval.py").write_text(EVAL)
    assert _check(tmp_path, monkeypatch, "eval.py") == []
