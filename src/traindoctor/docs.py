"""Rule documentation rendered from the rule classes (ruff's page template).

``traindoctor rule TD102`` prints :func:`render_rule`; ``docs/rules/TDnnn.md`` hold the same text,
written by ``python -m traindoctor.docs`` (``make docs``); a test fails when they drift.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from traindoctor.registry import all_rules
from traindoctor.rules.base import Rule


def _para(text: str) -> str:
    return textwrap.dedent(text).strip()


def _code(text: str) -> str:
    return "```python\n" + textwrap.dedent(text).strip("\n") + "\n```"


def render_rule(rule: type[Rule]) -> str:
    origins = " and ".join(rule.origins()) or "none"
    facts = [
        f"Severity: {rule.severity.value}",
        f"Found by: {origins}",
        f"GPU only: {'yes' if rule.gpu_only else 'no'}",
        f"Fix: {rule.fixable}",
    ]
    if not rule.default_enabled:
        facts.append("Enabled by default: no")
    parts = [f"# {rule.code}: {rule.name}", "", " · ".join(facts), "", _para(rule.summary), ""]
    sections = [
        ("What it does", _para(rule.what_it_does) if rule.what_it_does else ""),
        ("Why is this bad?", _para(rule.why_bad) if rule.why_bad else ""),
        ("Example", _code(rule.example) if rule.example.strip() else ""),
        ("Use instead", _code(rule.use_instead) if rule.use_instead.strip() else ""),
        ("Fix safety", _para(rule.fix_safety) if rule.fix_safety else ""),
        ("Options", _para(rule.options) if rule.options else ""),
        ("References", "\n".join(f"- <{r}>" for r in rule.references)),
    ]
    for title, body in sections:
        if body:
            parts += [f"## {title}", "", body, ""]
    return "\n".join(parts).rstrip() + "\n"


def render_index() -> str:
    lines = [
        "# Rules",
        "",
        "Generated from the rule classes by `make docs`; do not edit by hand.",
        "",
        "| code | name | severity | found by | GPU only | fix |",
        "|---|---|---|---|---|---|",
    ]
    for r in all_rules():
        lines.append(
            f"| [{r.code}]({r.code}.md) | {r.name} | {r.severity.value} | {', '.join(r.origins())} "
            f"| {'yes' if r.gpu_only else ''} | {r.fixable if r.fixable != 'never' else ''} |"
        )
    return "\n".join(lines) + "\n"


def expected_pages() -> dict[str, str]:
    pages = {f"{r.code}.md": render_rule(r) for r in all_rules()}
    pages["README.md"] = render_index()
    return pages


def write_docs(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in expected_pages().items():
        path = folder / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    for stale in folder.glob("TD*.md"):
        if stale.name not in expected_pages():
            stale.unlink()
            written.append(stale)
    return written


if __name__ == "__main__":  # pragma: no cover
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/rules")
    for p in write_docs(target):
        print(f"wrote {p}")
