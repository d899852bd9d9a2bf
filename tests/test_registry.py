"""The registry against the catalog (docs/catalog.md, a copy of the project's contract)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from traindoctor.registry import UnknownCodeError, all_rules, get_rule, select_codes

CATALOG = Path(__file__).resolve().parent.parent / "docs" / "catalog.md"
ROW = re.compile(r"^\| (TD\d{3}) \| ([a-z0-9-]+) \| ([S–-]) \| ([R–-]) \| (\w+)( GPU)? \|")


def catalog_rows():
    for line in CATALOG.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            code, name, s, r, sev, gpu = m.groups()
            yield code, name, s == "S", r == "R", sev, bool(gpu)


def test_every_catalog_code_has_exactly_one_rule():
    codes = [c for c, *_ in catalog_rows()]
    assert len(codes) == 52
    assert [r.code for r in all_rules()] == ["TD000", *codes]


@pytest.mark.parametrize("row", list(catalog_rows()), ids=lambda r: r[0])
def test_rule_metadata_matches_catalog(row):
    code, name, static, runtime, severity, gpu = row
    rule = get_rule(code)
    assert rule is not None
    assert (rule.name, rule.static, rule.runtime, rule.severity.value, rule.gpu_only) == (
        name,
        static,
        runtime,
        severity,
        gpu,
    )


def test_rule_modules_are_named_after_code_and_name():
    for rule in all_rules():
        leaf = rule.__module__.rsplit(".", 1)[-1]
        assert leaf == f"{rule.code.lower()}_{rule.name.replace('-', '_')}"


def test_prefix_selection():
    assert select_codes(["TD1"]) == {f"TD10{i}" for i in range(1, 8)}
    assert select_codes(["TD1"], ["TD10"]) == set()
    assert select_codes(["TD102"], ["TD1"]) == {"TD102"}  # the more specific wins
    assert "TD301" in select_codes(None) and "TD301" not in select_codes(None, ["TD3"])
    assert select_codes(["ALL"]) == {r.code for r in all_rules()}
    assert select_codes(["td5"]) == {f"TD50{i}" for i in range(1, 8)}
    with pytest.raises(UnknownCodeError):
        select_codes(["TD9"])


def test_get_rule_by_name():
    assert get_rule("pin-memory-off").code == "TD101"
    assert get_rule("td101").code == "TD101"
    assert get_rule("nope") is None


def test_every_runtime_rule_has_a_monitor_and_only_those():
    from traindoctor.doctor.monitors import all_monitors

    monitored = {m.rule.code for m in all_monitors()}
    assert monitored == {r.code for r in all_rules() if r.runtime}
    for monitor in all_monitors():
        assert monitor.__module__ == monitor.rule.__module__  # one rule, one module


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n",
        "  a\n    b\n  c",
        "\ta\n\t\tb",
        "\ta\n  b",
        "  a\n \n\t \n  b\n",
        "   x",
        "x\n  y",
        "  a\n  \n  b  \n",
        " \t a\n \t b",
        "  a\r\n  b\r\n",
        "\n\n    def f():\n        pass\n    ",
    ],
)
def test_rule_examples_dedent_like_textwrap(text):
    import textwrap

    from traindoctor.rules.base import dedent

    assert dedent(text) == textwrap.dedent(text)
