"""The docs pages are generated from the rule classes; they must not drift, nor be empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from traindoctor.docs import expected_pages, render_rule
from traindoctor.registry import all_rules

DOCS = Path(__file__).resolve().parent.parent / "docs" / "rules"


@pytest.mark.parametrize("name,text", sorted(expected_pages().items()))
def test_docs_page_matches_rule_class(name, text):
    path = DOCS / name
    assert path.exists(), f"{path} missing: run `make docs`"
    assert path.read_text(encoding="utf-8") == text, f"{path} drifted from the rule class: run `make docs`"


def test_no_stale_pages():
    stale = {p.name for p in DOCS.glob("TD*.md")} - set(expected_pages())
    assert stale == set()


@pytest.mark.parametrize("rule", all_rules(), ids=lambda r: r.code)
def test_rule_doc_has_every_section(rule):
    page = render_rule(rule)
    for heading in ("## What it does", "## Why is this bad?", "## Example", "## Use instead", "## References"):
        assert heading in page, f"{rule.code} doc lacks {heading}"
    assert rule.summary.endswith("."), rule.code


def test_readme_lists_every_rule():
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    missing = [r.code for r in all_rules() if f"[{r.code}](docs/rules/{r.code}.md) | {r.name} |" not in readme]
    assert missing == []


def test_readme_finding_examples_match_the_checker():
    """Every `path:row:col: CODE` example line in the README is what `check` really reports."""
    import re

    from traindoctor.check.engine import check_source
    from traindoctor.config import Settings

    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    shown = set(re.findall(r"^(examples/static/\S+\.py):(\d+):(\d+): (TD\d{3}) ", readme, re.M))
    assert shown, "the README shows no static finding example"
    for path, row, col, code in sorted(shown):
        result = check_source((root / path).read_bytes(), path, Settings(min_torch_version="2.13"))
        got = {(f.location.row, f.location.column, f.code) for f in result.findings}
        assert (int(row), int(col), code) in got, f"README shows {path}:{row}:{col} {code}"
