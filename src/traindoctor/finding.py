"""The one finding type shared by the static checker and the runtime doctor.

Reporters never branch on where a finding came from: a static finding and a runtime finding
carry the same fields; runtime findings simply fill ``evidence`` and ``step``. Field names follow
ruff's JSON output where ruff has an equivalent (``code``, ``message``, ``filename``,
``location {row, column}``, ``end_location``, ``fix {applicability, edits, message}``, ``url``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

DOCS_URL = "https://traindoctor.dev/rules/{code}"


class Severity(str, enum.Enum):
    """How bad a finding is: results wrong or lost, slow or wasteful, or worth a look."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return {"error": 0, "warning": 1, "info": 2}[self.value]


class Origin(str, enum.Enum):
    STATIC = "static"
    RUNTIME = "runtime"


@dataclass(frozen=True, order=True)
class Location:
    """A position in a file: 1-based row, 1-based column counted in characters (as ruff)."""

    row: int
    column: int

    def to_dict(self) -> dict[str, int]:
        return {"row": self.row, "column": self.column}


@dataclass(frozen=True)
class Related:
    """Another place that explains a finding: the project module where the evidence lives
    (``utils.py:12`` builds the loader that ``train.py:40`` trains with). Same shape as a
    finding's own location, so reporters print it without knowing where it came from."""

    filename: str
    location: Location | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "filename": self.filename,
            "location": self.location.to_dict() if self.location else None,
            "message": self.message,
        }


@dataclass(frozen=True)
class Edit:
    """Replace the text between ``location`` and ``end_location`` with ``content``."""

    content: str
    location: Location
    end_location: Location

    def to_dict(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "location": self.location.to_dict(),
            "end_location": self.end_location.to_dict(),
        }


@dataclass(frozen=True)
class Fix:
    """A set of edits that together fix one finding.

    ``applicability`` is ``"safe"`` (applied by ``--fix``) or ``"unsafe"`` (needs
    ``--unsafe-fixes``: it may change behaviour in a way the user must review).
    """

    message: str
    edits: tuple[Edit, ...]
    applicability: str = "safe"

    @property
    def is_safe(self) -> bool:
        return self.applicability == "safe"

    def to_dict(self) -> dict[str, Any]:
        return {
            "applicability": self.applicability,
            "edits": [e.to_dict() for e in self.edits],
            "message": self.message,
        }


@dataclass(frozen=True)
class Finding:
    """One mistake found in one place, statically or at run time."""

    code: str
    name: str
    severity: Severity
    message: str
    filename: str
    location: Location | None
    end_location: Location | None = None
    origin: Origin = Origin.STATIC
    fix: Fix | None = None
    help: str | None = None
    evidence: Mapping[str, Any] | None = None
    step: int | None = None
    #: Notebook findings: the 1-based cell (counting every cell, as ruff does); rows are then
    #: rows within that cell. None for plain files.
    cell: int | None = None
    source_line: str | None = field(default=None, compare=False)
    #: Other places (usually other project files) that hold the evidence for this finding.
    related: tuple[Related, ...] = ()

    @property
    def url(self) -> str:
        return DOCS_URL.format(code=self.code)

    def sort_key(self) -> tuple[Any, ...]:
        loc = self.location or Location(0, 0)
        return (self.filename, self.cell or 0, loc.row, loc.column, self.code, self.message)

    def with_(self, **changes: Any) -> Finding:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "code": self.code,
            "name": self.name,
            "severity": self.severity.value,
            "message": self.message,
            "filename": self.filename,
            "cell": self.cell,
            "location": self.location.to_dict() if self.location else None,
            "end_location": self.end_location.to_dict() if self.end_location else None,
            "noqa_row": self.location.row if self.location else None,
            "origin": self.origin.value,
            "fix": self.fix.to_dict() if self.fix else None,
            "help": self.help,
            "url": self.url,
        }
        if self.related:
            data["related"] = [r.to_dict() for r in self.related]
        if self.origin is Origin.RUNTIME or self.evidence is not None:
            data["evidence"] = dict(self.evidence) if self.evidence else {}
            data["step"] = self.step
        return data


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Deterministic order: file, cell, row, column, code, message."""
    return sorted(findings, key=Finding.sort_key)
