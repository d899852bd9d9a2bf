"""Apply fixes as text edits by source range, keeping every other byte of the file as it was."""

from __future__ import annotations

from collections.abc import Iterable

from traindoctor.finding import Edit, Finding, Location


def _offsets(lines: list[str]) -> list[int]:
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    return starts


def _to_offset(starts: list[int], loc: Location) -> int:
    row = min(max(loc.row, 1), len(starts) - 1) if len(starts) > 1 else 1
    base = starts[row - 1] if row - 1 < len(starts) else starts[-1]
    return base + loc.column - 1


def apply_edits(source: str, lines: list[str], edits: Iterable[Edit]) -> str:
    """Apply non-overlapping edits (callers ensure that) from the end of the file backwards."""
    starts = _offsets(lines)
    spans = sorted(
        ((_to_offset(starts, e.location), _to_offset(starts, e.end_location), e.content) for e in edits),
        reverse=True,
    )
    out = source
    for start, end, content in spans:
        out = out[:start] + content + out[end:]
    return out


def select_fixes(findings: list[Finding], unsafe: bool, lines: list[str]) -> tuple[list[Edit], list[Finding]]:
    """Pick fixes to apply in one pass: applicable ones whose edits overlap no earlier pick."""
    starts = _offsets(lines)
    taken: list[tuple[int, int]] = []
    edits: list[Edit] = []
    fixed: list[Finding] = []
    for finding in findings:
        fix = finding.fix
        if fix is None or not fix.edits or (not fix.is_safe and not unsafe):
            continue
        spans = [(_to_offset(starts, e.location), _to_offset(starts, e.end_location)) for e in fix.edits]
        # Touching spans conflict too: two insertions at one point have no defined order.
        if any(not (e < s0 or s > e0) for s, e in spans for s0, e0 in taken):
            continue
        taken.extend(spans)
        edits.extend(fix.edits)
        fixed.append(finding)
    return edits, fixed
