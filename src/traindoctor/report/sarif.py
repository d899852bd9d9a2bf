"""SARIF 2.1.0 output, with rule descriptors generated from the rule classes' docs.

Written to pass GitHub code scanning's ingestion as well as the schema: every rule has a short
and a full description of at most 1,024 characters and a help text, every located result a
region with start and end line and column. ``partialFingerprints`` are left to GitHub's
``upload-sarif`` action, which computes them from the checked-out files (for every result with a
relative path and a start line). Notebook results carry no region: their rows count in a cell,
not in the file's JSON, so the cell and row go in the message and the properties instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from traindoctor.finding import Finding, Location, Related, Severity
from traindoctor.version import __version__

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
#: GitHub's ``problem.severity`` rule property (it orders and filters alerts by it).
_PROBLEM_SEVERITY = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "recommendation"}
#: The longest rule description GitHub code scanning accepts.
MAX_DESCRIPTION = 1024
#: SARIF's ``result.baselineState`` values.
BASELINE_STATES = ("new", "unchanged", "updated", "absent")


def shorten(text: str, limit: int = MAX_DESCRIPTION) -> str:
    """``text`` if it fits in ``limit`` characters, else its longest run of whole sentences that
    does (or of whole words, ending in an ellipsis)."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    end = cut.rfind(". ")
    if end > 0:
        return cut[: end + 1]
    return cut[: limit - 1].rsplit(" ", 1)[0] + "…"


def _uri(filename: str) -> str:
    path = Path(filename)
    if path.is_absolute():
        return path.as_uri()
    return path.as_posix()


def rule_descriptors() -> list[dict[str, Any]]:
    from traindoctor.docs import render_rule
    from traindoctor.registry import all_rules

    out = []
    for rule in all_rules():
        out.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": shorten(rule.summary)},
                "fullDescription": {"text": shorten(" ".join(rule.what_it_does.split()) or rule.summary)},
                "help": {"text": rule.summary, "markdown": render_rule(rule)},
                "helpUri": f"https://traindoctor.dev/rules/{rule.code}",
                "defaultConfiguration": {"level": _LEVEL[rule.severity]},
                "properties": {
                    "origins": rule.origins(),
                    "gpu_only": rule.gpu_only,
                    "tags": [rule.name],
                    "problem.severity": _PROBLEM_SEVERITY[rule.severity],
                },
            }
        )
    return out


def _related(index: int, rel: Related) -> dict[str, Any]:
    physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(rel.filename)}}
    if rel.location is not None:
        physical["region"] = {"startLine": rel.location.row, "startColumn": rel.location.column}
    return {"id": index, "physicalLocation": physical, "message": {"text": rel.message}}


def _region(start: Location, end: Location | None, source_line: str | None) -> dict[str, int]:
    """A finding's region; without an end, it ends where its line does (or where it starts)."""
    region = {"startLine": start.row, "startColumn": start.column}
    if end is not None:
        region["endLine"] = end.row
        region["endColumn"] = end.column
    else:
        line = (source_line or "").rstrip("\r\n")
        region["endLine"] = start.row
        region["endColumn"] = max(start.column, len(line) + 1)
    return region


def _result(f: Finding, index: dict[str, int]) -> dict[str, Any]:
    notebook = f.cell is not None
    text = f.message
    if notebook:
        # SARIF regions count lines of the file (the notebook's JSON), not of a cell: the cell
        # and the row within it go in the message and the properties instead.
        row = f", line {f.location.row}" if f.location else ""
        text = f"cell {f.cell}{row}: {f.message}"
    result: dict[str, Any] = {
        "ruleId": f.code,
        "level": _LEVEL[f.severity],
        "message": {"text": text},
        "properties": {"name": f.name, "origin": f.origin.value},
    }
    if notebook:
        result["properties"]["cell"] = f.cell
        if f.location is not None:
            result["properties"]["row"] = f.location.row
            result["properties"]["column"] = f.location.column
    if f.code in index:
        result["ruleIndex"] = index[f.code]
    if f.filename:
        physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(f.filename)}}
        if f.location is not None and not notebook:
            physical["region"] = _region(f.location, f.end_location, f.source_line)
        result["locations"] = [{"physicalLocation": physical}]
    if f.related:
        result["relatedLocations"] = [_related(i, r) for i, r in enumerate(f.related)]
    if f.evidence:
        result["properties"]["evidence"] = dict(f.evidence)
    if f.step is not None:
        result["properties"]["step"] = f.step
    if f.fix is not None and not notebook:
        result["fixes"] = [
            {
                "description": {"text": f.fix.message},
                "artifactChanges": [
                    {
                        "artifactLocation": {"uri": _uri(f.filename)},
                        "replacements": [
                            {
                                "deletedRegion": {
                                    "startLine": e.location.row,
                                    "startColumn": e.location.column,
                                    "endLine": e.end_location.row,
                                    "endColumn": e.end_location.column,
                                },
                                "insertedContent": {"text": e.content},
                            }
                            for e in f.fix.edits
                        ],
                    }
                ],
                "properties": {"applicability": f.fix.applicability},
            }
        ]
    return result


def build(findings: list[Finding], baseline_state: str | None = None) -> dict[str, Any]:
    """The SARIF log; ``baseline_state`` (one of BASELINE_STATES) marks every result, as
    ``check --baseline`` does with ``new``."""
    rules = rule_descriptors()
    index = {r["id"]: i for i, r in enumerate(rules)}
    results = [_result(f, index) for f in findings]
    if baseline_state is not None:
        if baseline_state not in BASELINE_STATES:
            raise ValueError(f"not a SARIF baselineState: {baseline_state!r}")
        for result in results:
            result["baselineState"] = baseline_state
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "traindoctor",
                        "version": __version__,
                        "informationUri": "https://traindoctor.dev",
                        "rules": rules,
                    }
                },
                "results": results,
            }
        ],
    }


def render(findings: list[Finding], baseline_state: str | None = None) -> str:
    return json.dumps(build(findings, baseline_state), indent=2, default=str) + "\n"
