"""GitHub Actions workflow commands: one annotation per finding."""

from __future__ import annotations

from traindoctor.finding import Finding, Severity

_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_prop(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def render(findings: list[Finding]) -> str:
    lines = []
    for f in findings:
        props = [f"file={_escape_prop(f.filename)}"]
        message = f"{f.code} {f.message}"
        if f.cell is not None:
            # Rows are rows of the cell, not of the notebook's JSON: say where in the message.
            where = f"cell {f.cell}:{f.location.row}:{f.location.column}" if f.location else f"cell {f.cell}"
            message = f"{where}: {message}"
        else:
            if f.location is not None:
                props += [f"line={f.location.row}", f"col={f.location.column}"]
            if f.end_location is not None:
                props += [f"endLine={f.end_location.row}", f"endColumn={f.end_location.column}"]
        props.append(f"title={_escape_prop(f'{f.code} ({f.name})')}")
        lines.append(f"::{_LEVEL[f.severity]} {','.join(props)}::{_escape_data(message)}")
    return "\n".join(lines) + ("\n" if lines else "")
