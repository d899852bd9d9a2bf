"""Type-checking hygiene: every ``# type: ignore`` in the package names its error code and its reason.

mypy itself (run by ``make test``, configured in pyproject.toml) reports code-less and unused
ignores; this test keeps the reason, which mypy cannot ask for, and the count, which only shrinks.
"""

from __future__ import annotations

import re
from pathlib import Path

import traindoctor

SRC = Path(traindoctor.__file__).parent
#: ``# type: ignore[code]  # reason``: the code(s), two spaces, a comment that says why.
WELL_FORMED = re.compile(r"# type: ignore\[[a-z-]+(?:, *[a-z-]+)*\]  # \S")
#: What a typed torch API really needs today; lower it when one goes.
MAX_IGNORES = 20


def _ignores() -> list[str]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "type: ignore" in line:
                out.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    return out


def test_every_type_ignore_has_a_code_and_a_reason() -> None:
    assert [line for line in _ignores() if not WELL_FORMED.search(line)] == []


def test_the_number_of_type_ignores_does_not_grow() -> None:
    assert len(list(SRC.rglob("*.py"))) > 100  # the scan reads the package
    assert len(_ignores()) <= MAX_IGNORES


def test_the_pattern_rejects_a_bare_ignore() -> None:
    assert not WELL_FORMED.search("x = f()  # type: ignore")
    assert not WELL_FORMED.search("x = f()  # type: ignore[arg-type]")
    assert WELL_FORMED.search("x = f()  # type: ignore[no-untyped-call]  # torch leaves it unannotated")
