"""Which project files import a module: the reverse of the project model's import resolution.

``validation.py`` defines ``run_evaluation``; whether it is training code depends on who calls it,
and the project model only follows imports forwards. :func:`importers_of` answers the reverse
question from an index of every ``.py`` file under the project root: the import statements of each
file (read with a regular expression, then resolved as the project model resolves them). The index
is built once per root and reused while no file under the root changed (names, sizes and
modification times), so a run over a whole repository pays for it once.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.project import Project

#: Folders never indexed (environments, build outputs, caches).
_SKIPPED = frozenset(("venv", "build", "dist", "node_modules", "__pycache__", "site-packages", "env"))
#: An index is not built for bigger trees (unknown stays unknown).
_MAX_FILES = 4000
_MAX_BYTES = 2_000_000
_IMPORT = re.compile(
    rb"^[ \t]*(?:from[ \t]+(\.*)([\w.]*)[ \t]+import[ \t]+(\([^)]*\)|[^\n#;]+)|import[ \t]+([^\n#;]+))", re.MULTILINE
)
#: root -> (the files' signature, module path -> the files that import it)
_INDEXES: dict[str, tuple[tuple[tuple[str, int, int], ...], dict[str, tuple[str, ...]]]] = {}


def project_files(root: Path) -> list[str] | None:
    """Every ``.py`` file under ``root`` outside hidden and environment folders (None: too many)."""
    out: list[str] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED)
        for name in sorted(files):
            if name.endswith(".py"):
                out.append(os.path.join(folder, name))
                if len(out) > _MAX_FILES:
                    return None
    return out


def importers_of(project: Project, path: str) -> tuple[str, ...] | None:
    """The project files that import the module ``path`` (``import pkg.mod``, ``from pkg import
    mod``, ``from .mod import x``); None when the tree is too big to index."""
    index = _index(project)
    return None if index is None else index.get(path, ())


def _index(project: Project) -> dict[str, tuple[str, ...]] | None:
    files = project_files(project.root)
    if files is None:
        return None
    signature: list[tuple[str, int, int]] = []
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        signature.append((f, st.st_size, st.st_mtime_ns))
    key = str(project.root)
    cached = _INDEXES.get(key)
    if cached is not None and cached[0] == tuple(signature):
        return cached[1]
    table: dict[str, set[str]] = {}
    for f, size, _ in signature:
        if size > _MAX_BYTES:
            continue
        try:
            data = Path(f).read_bytes()
        except OSError:
            continue
        for module in _imported(project, Path(f), data):
            if module != f:
                table.setdefault(module, set()).add(f)
    index = {m: tuple(sorted(s)) for m, s in table.items()}
    _INDEXES[key] = (tuple(signature), index)
    return index


def _imported(project: Project, importer: Path, data: bytes) -> set[str]:
    """The project modules the import statements of ``data`` name (submodules a ``from pkg import
    mod`` imports included)."""
    out: set[str] = set()
    for m in _IMPORT.finditer(data):
        dots, module, names, plain = m.groups()
        if plain is not None:
            for part in plain.decode("utf-8", "replace").split(","):
                name = part.strip().split(" as ")[0].strip()
                if name and (found := project.module_file(name, importer)) is not None:
                    out.add(found)
            continue
        level = len(dots or b"")
        base = (module or b"").decode("utf-8", "replace")
        if not base and not level:
            continue
        found = project.module_file(base, importer, level) if (base or level) else None
        if found is not None:
            out.add(found)
        for part in (names or b"").decode("utf-8", "replace").strip("()").split(","):
            name = part.strip().split(" as ")[0].strip()
            if name.isidentifier():
                sub = project.module_file(f"{base}.{name}" if base else name, importer, level)
                if sub is not None:
                    out.add(sub)
    return out
