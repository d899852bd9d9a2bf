"""Which major version of a package a project pins: its requirement files, read as text.

``requirements*.txt``, ``setup.py``/``setup.cfg``/``pyproject.toml`` and conda ``environment*.yml``
at the project root (and one folder below, where repositories keep ``requirements/``) are
searched for a requirement of the package: ``pytorch-lightning==1.4.2``, ``lightning<2``,
``pytorch_lightning>=2.1``. The answer is the highest major version every such requirement allows, else
None (no requirement, one without an upper bound, or requirements that disagree). Nothing is
executed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_FILES = re.compile(r"^(requirements.*\.txt|setup\.py|setup\.cfg|pyproject\.toml|environment.*\.ya?ml|.*\.in)$")
_MAX_BYTES = 200_000
_SPEC = re.compile(r"(?P<op>==|~=|<=|>=|<|>|=)\s*(?P<major>\d+)(?:\.(?P<minor>\d+))?")

#: (root, package names) -> answer, per process.
_MEMO: dict[tuple[str, tuple[str, ...]], int | None] = {}


def pinned_major(root: Path, packages: tuple[str, ...]) -> int | None:
    """The major version of ``packages`` (alternative names of one package) the project pins."""
    key = (str(root), packages)
    if key not in _MEMO:
        if len(_MEMO) > 256:
            _MEMO.clear()
        _MEMO[key] = _read(root, packages)
    return _MEMO[key]


def _read(root: Path, packages: tuple[str, ...]) -> int | None:
    names = "|".join("[-_]".join(map(re.escape, re.split(r"[-_]", p))) for p in packages)
    requirement = re.compile(rf"(?<![\w.-])(?:{names})\s*(?P<specs>(?:[<>=~!]=?\s*[\d.*]+\s*,?\s*)+)", re.I)
    majors: set[int] = set()
    for path in _candidates(root):
        try:
            if os.path.getsize(path) > _MAX_BYTES:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for match in requirement.finditer(text):
            major = _major(match.group("specs"))
            if major is None:
                return None
            majors.add(major)
    return majors.pop() if len(majors) == 1 else None


def _major(specs: str) -> int | None:
    """The highest major version a specifier set allows (``==1.4.2``: 1, ``<2``: 1, ``>=1.6,<1.9``:
    1), else None (no upper bound, or an empty set)."""
    low, high = 0, 10**6
    for match in _SPEC.finditer(specs):
        op, major = match.group("op"), int(match.group("major"))
        minor = match.group("minor")
        if op in ("==", "=", "~="):
            low, high = max(low, major), min(high, major)
        elif op == ">=" or op == ">":
            low = max(low, major)
        elif op == "<":
            high = min(high, major - 1 if minor in (None, "0") else major)
        elif op == "<=":
            high = min(high, major)
    return high if low <= high < 10**6 else None


def _candidates(root: Path) -> list[Path]:
    out: list[Path] = []
    for folder in (root, root / "requirements", root / "requirement", root / "env", root / "envs"):
        try:
            names = sorted(os.listdir(folder))
        except OSError:
            continue
        # inside a requirements folder every .txt/.in file is a requirement file
        out += [folder / n for n in names if _FILES.match(n) or (folder != root and n.endswith((".txt", ".in")))]
    return out
