"""The reverse of import resolution: which project files import a module."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import write

from traindoctor.static.importers import importers_of
from traindoctor.static.project import Project


def test_importers_of_a_module(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("")
    write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/validation.py": "def run_evaluation(model):\n    pass\n",
            "pkg/testing.py": "from .validation import run_evaluation\n",
            "pkg/model.py": "from pkg.validation import (\n    run_evaluation,\n)\n",
            "search.py": "import pkg.validation as v\n",
            "sub.py": "from pkg import validation, model\n",
            "other.py": "import validation_tools\nfrom pkg import model\n",
            ".venv/lib/x.py": "from pkg import validation\n",
        },
    )
    project = Project(tmp_path.resolve())
    target = str(tmp_path.resolve() / "pkg" / "validation.py")
    found = {Path(p).relative_to(tmp_path.resolve()).as_posix() for p in importers_of(project, target) or ()}
    assert found == {"pkg/testing.py", "pkg/model.py", "search.py", "sub.py"}
    model = str(tmp_path.resolve() / "pkg" / "model.py")
    assert {Path(p).name for p in importers_of(project, model) or ()} == {"sub.py", "other.py"}
