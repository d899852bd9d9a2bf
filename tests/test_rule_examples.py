"""Every rule's own valid/invalid examples, run through the real engine (as Fixit does).

An invalid example must be reported on exactly the lines that end with a ``# TDnnn`` marker for
the rule's code, and nowhere else; a valid example must get no finding of the rule. Expected fixes
are compared byte-for-byte, re-checked for idempotence and re-parsed.
"""

from __future__ import annotations

import ast
import re

import pytest

from traindoctor.check.engine import check_source, instantiate
from traindoctor.config import Settings, settings_from_mapping
from traindoctor.registry import all_rules

MARKER = re.compile(r"#\s*(TD\d{3})\b")


def _settings(extra) -> Settings:
    return settings_from_mapping(dict(extra)) if extra else Settings(min_torch_version="2.13")


def _cases(kind: str):
    for rule in all_rules():
        if not rule.static:
            continue
        examples = rule.valid_examples() if kind == "valid" else list(rule.invalid)
        for i, ex in enumerate(examples):
            yield pytest.param(rule, ex, id=f"{rule.code}-{kind}-{i}")


def _rows_with_marker(code: str, source: str) -> set[int]:
    rows = set()
    for n, line in enumerate(source.splitlines(), 1):
        if code in MARKER.findall(line):
            rows.add(n)
    return rows


def _check(rule, source, settings, **kw):
    return check_source(source, "example.py", settings, instantiate([rule.code]), **kw)


@pytest.mark.parametrize("rule,example", list(_cases("valid")))
def test_valid_example_is_silent(rule, example):
    settings = _settings({"min-torch-version": "2.13", **example.settings})
    result = _check(rule, example.code, settings)
    assert not result.internal_errors
    assert [f for f in result.findings if f.code == rule.code] == [], example.code


@pytest.mark.parametrize("rule,example", list(_cases("invalid")))
def test_invalid_example_fires_on_marked_lines(rule, example):
    settings = _settings({"min-torch-version": "2.13", **example.settings})
    expected = _rows_with_marker(rule.code, example.code)
    assert expected, f"{rule.code}: invalid example has no '# {rule.code}' marker"
    result = _check(rule, example.code, settings)
    assert not result.internal_errors
    got = {f.location.row for f in result.findings if f.code == rule.code}
    assert got == expected, example.code
    for f in result.findings:
        assert f.name == rule.name and f.severity == rule.severity
        assert f.message and f.message[-1] in ".)`'\"", f.message


@pytest.mark.parametrize("rule,example", list(_cases("invalid")))
def test_invalid_example_fix(rule, example):
    if rule.code == "TD000":
        pytest.skip("no fix for unparsable files")
    settings = _settings({"min-torch-version": "2.13", **example.settings})
    fixed = _check(rule, example.code, settings, fix=True)
    after = fixed.fixed_source if fixed.fixed_source is not None else example.code
    if example.fixed is None:
        assert after == example.code, "a safe fix was applied but the example does not expect one"
    else:
        assert after == example.fixed
        ast.parse(after)
        again = _check(rule, after, settings, fix=True)
        assert again.fixed_source is None, "fix is not idempotent"
    if example.unsafe_fixed is not None:
        unsafe = _check(rule, example.code, settings, fix=True, unsafe_fixes=True)
        after_unsafe = unsafe.fixed_source if unsafe.fixed_source is not None else example.code
        assert after_unsafe == example.unsafe_fixed
        ast.parse(after_unsafe)


def test_every_static_rule_has_enough_examples():
    """The issue asks for at least three realistic positives and three negatives per rule."""
    thin = [r.code for r in all_rules() if r.static and r.code != "TD000" and (len(r.invalid) < 3 or len(r.valid) < 3)]
    assert thin == []
