"""Findings as LSP diagnostics and edits: positions, ranges, severities.

A finding's location is 1-based (row, column), the column counted in characters; an LSP position
is 0-based (line, character), the character counted in the code units the client and server
agreed on at start-up (UTF-16 unless the client offers another). ``lines`` are always the lines of
the text that was checked (a file's, or a notebook cell's).
"""

from __future__ import annotations

from lsprotocol import types
from pygls.workspace import PositionCodec

from traindoctor.check.noqa import split_ending
from traindoctor.finding import Edit, Finding, Location, Severity
from traindoctor.registry import get_rule

SOURCE = "traindoctor"
_SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}


def _line(lines: list[str], index: int) -> str:
    return split_ending(lines[index])[0] if 0 <= index < len(lines) else ""


def position(lines: list[str], location: Location, codec: PositionCodec) -> types.Position:
    """The LSP position of a 1-based (row, character column) location, clamped to the text."""
    index = min(max(location.row - 1, 0), max(len(lines) - 1, 0))
    text = _line(lines, index)
    return types.Position(line=index, character=codec.client_num_units(text[: max(location.column - 1, 0)]))


def finding_range(lines: list[str], finding: Finding, codec: PositionCodec) -> types.Range:
    """The finding's range; without an end it runs to the end of its line."""
    start = finding.location or Location(1, 1)
    end = finding.end_location
    if end is None or end < start:
        end = Location(start.row, len(_line(lines, start.row - 1)) + 1)
    return types.Range(start=position(lines, start, codec), end=position(lines, end, codec))


def text_edit(lines: list[str], edit: Edit, codec: PositionCodec) -> types.TextEdit:
    return types.TextEdit(
        range=types.Range(start=position(lines, edit.location, codec), end=position(lines, edit.end_location, codec)),
        new_text=edit.content,
    )


def diagnostic(
    lines: list[str], finding: Finding, codec: PositionCodec, related: list[types.DiagnosticRelatedInformation]
) -> types.Diagnostic:
    """The diagnostic the editor shows for ``finding``."""
    rule = get_rule(finding.code)
    return types.Diagnostic(
        range=finding_range(lines, finding, codec),
        message=finding.message,
        severity=_SEVERITY[finding.severity],
        code=finding.code,
        code_description=types.CodeDescription(href=finding.url) if rule is not None else None,
        source=SOURCE,
        related_information=related or None,
    )


def contains(rng: types.Range, pos: types.Position) -> bool:
    """Whether ``pos`` is inside ``rng`` (its end included, as editors place the cursor)."""
    start, end = (rng.start.line, rng.start.character), (rng.end.line, rng.end.character)
    return start <= (pos.line, pos.character) <= end


def overlaps(a: types.Range, b: types.Range) -> bool:
    return contains(a, b.start) or contains(a, b.end) or contains(b, a.start)
