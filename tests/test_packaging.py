"""Packaging: every source folder is a regular package, so `pip install .` ships all of it."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "traindoctor"


def test_every_source_folder_is_a_package():
    folders = [p for p in SRC.rglob("*") if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))]
    assert folders, "no source folders found"
    missing = [str(p.relative_to(SRC)) for p in folders if not (p / "__init__.py").exists()]
    assert missing == []
