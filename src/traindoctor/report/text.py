"""Human-readable output, ruff-style: location, code, message, the source line and a caret."""

from __future__ import annotations

from traindoctor.finding import Finding


def render_finding(f: Finding, show_source: bool = True) -> str:
    loc = f"{f.location.row}:{f.location.column}:" if f.location else ""
    if f.cell is not None:
        loc = f"cell {f.cell}:{loc}"
    where = f"{f.filename}:{loc}" if f.filename else ""
    mark = " [*]" if f.fix is not None and f.fix.is_safe else ""
    out = [f"{where} {f.code}{mark} {f.message}".lstrip()]
    if show_source and f.source_line is not None and f.location is not None:
        row = str(f.location.row)
        pad = " " * len(row)
        line = f.source_line.expandtabs(4) if "\t" not in f.source_line else f.source_line
        start = f.location.column - 1
        if f.end_location is not None and f.end_location.row == f.location.row:
            width = max(f.end_location.column - f.location.column, 1)
        else:
            width = max(len(line.rstrip()) - start, 1)
        out.append(f" {row} | {line}")
        out.append(f" {pad} | {' ' * start}{'^' * width}")
    for rel in f.related:
        at = f"{rel.filename}:{rel.location.row}:{rel.location.column}" if rel.location else rel.filename
        out.append(f"  related: {at}: {rel.message}")
    if f.evidence:
        shown = ", ".join(f"{k}={_fmt(v)}" for k, v in f.evidence.items())
        out.append(f"  evidence: {shown}")
    if f.help:
        out.append(f"  help: {f.help}")
    elif f.fix is not None:
        out.append(f"  help: {f.fix.message}")
    return "\n".join(out)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def summary(findings: list[Finding], files: int | None = None) -> str:
    if not findings:
        if files is None:
            return "All checks passed!"
        return f"All checks passed! ({files} file{'s' if files != 1 else ''} checked)"
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.severity.value] = counts.get(f.severity.value, 0) + 1
    parts = [f"{counts[s]} {s}{'s' if counts[s] != 1 else ''}" for s in ("error", "warning", "info") if s in counts]
    n = len(findings)
    text = f"Found {n} finding{'s' if n != 1 else ''} ({', '.join(parts)})"
    if files is not None:
        text += f" in {files} file{'s' if files != 1 else ''}"
    fixable = sum(1 for f in findings if f.fix is not None and f.fix.is_safe)
    text += "."
    if fixable:
        text += f"\n[*] {fixable} fixable with the `--fix` option."
    unsafe = sum(1 for f in findings if f.fix is not None and not f.fix.is_safe)
    if unsafe:
        text += f"\n{unsafe} more fixable with `--fix --unsafe-fixes`."
    return text


def render(findings: list[Finding], show_source: bool = True) -> str:
    if not findings:
        return ""
    return "\n\n".join(render_finding(f, show_source) for f in findings) + "\n"


def statistics(findings: list[Finding]) -> str:
    rows: dict[str, list[Finding]] = {}
    for f in findings:
        rows.setdefault(f.code, []).append(f)
    lines = []
    for code in sorted(rows, key=lambda c: (-len(rows[c]), c)):
        group = rows[code]
        fixable = "[*]" if any(f.fix is not None and f.fix.is_safe for f in group) else "   "
        lines.append(f"{len(group):>5}  {code}  {fixable} {group[0].name}")
    return "\n".join(lines) + ("\n" if lines else "")
