"""SARIF 2.1.0 output, with rule descriptors generated from the rule classes' docs."""

from __future__ import annotations

import json
from pathlib import Path

from traindoctor.finding import Finding, Related, Severity
from traindoctor.version import __version__

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def _uri(filename: str) -> str:
    path = Path(filename)
    if path.is_absolute():
        return path.as_uri()
    return path.as_posix()


def rule_descriptors() -> list[dict]:
    from traindoctor.docs import render_rule
    from traindoctor.registry import all_rules

    out = []
    for rule in all_rules():
        out.append(
            {
                "id": rule.code,
                "name": rule.name,
                "shortDescription": {"text": rule.summary},
                "fullDescription": {"text": " ".join(rule.what_it_does.split()) or rule.summary},
                "help": {"text": rule.summary, "markdown": render_rule(rule)},
                "helpUri": f"https://traindoctor.dev/rules/{rule.code}",
                "defaultConfiguration": {"level": _LEVEL[rule.severity]},
                "properties": {
                    "origins": rule.origins(),
                    "gpu_only": rule.gpu_only,
                    "tags": [rule.name],
                },
            }
        )
    return out


def _related(index: int, rel: Related) -> dict:
    physical: dict = {"artifactLocation": {"uri": _uri(rel.filename)}}
    if rel.location is not None:
        physical["region"] = {"startLine": rel.location.row, "startColumn": rel.location.column}
    return {"id": index, "physicalLocation": physical, "message": {"text": rel.message}}


def _result(f: Finding, index: dict[str, int]) -> dict:
    notebook = f.cell is not None
    text = f.message
    if notebook:
        # SARIF regions count lines of the file (the notebook's JSON), not of a cell: the cell
        # and the row within it go in the message and the properties instead.
        row = f", line {f.location.row}" if f.location else ""
        text = f"cell {f.cell}{row}: {f.message}"
    result: dict = {
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
        physical: dict = {"artifactLocation": {"uri": _uri(f.filename)}}
        if f.location is not None and not notebook:
            region = {"startLine": f.location.row, "startColumn": f.location.column}
            if f.end_location is not None:
                region["endLine"] = f.end_location.row
                region["endColumn"] = f.end_location.column
            physical["region"] = region
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


def build(findings: list[Finding]) -> dict:
    rules = rule_descriptors()
    index = {r["id"]: i for i, r in enumerate(rules)}
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
                "results": [_result(f, index) for f in findings],
            }
        ],
    }


def render(findings: list[Finding]) -> str:
    return json.dumps(build(findings), indent=2, default=str) + "\n"
