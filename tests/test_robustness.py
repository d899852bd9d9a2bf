"""Bad or unusual input never crashes a rule: every rule runs over mangled versions of every
rule's examples (each example cut after every line, and with its lines shuffled in a fixed way)."""

from __future__ import annotations

import random

import pytest

from traindoctor.check.engine import check_source, instantiate
from traindoctor.config import Settings
from traindoctor.registry import all_rules

SETTINGS = Settings(min_torch_version="2.4")
RULES = instantiate(SETTINGS.enabled_codes())


def _examples() -> list[str]:
    out = []
    for rule in all_rules():
        out.extend(v.code for v in rule.valid_examples())
        out.extend(i.code for i in rule.invalid)
    return out


def _variants(source: str) -> list[str]:
    lines = source.splitlines(keepends=True)
    cuts = ["".join(lines[:n]) for n in range(1, len(lines))]
    rng = random.Random(len(source))  # fixed per example: deterministic
    shuffled = lines[:]
    rng.shuffle(shuffled)
    dedented = [line.lstrip() for line in lines]
    return [*cuts, "".join(shuffled), "".join(dedented)]


@pytest.mark.parametrize("index", range(0, len(_examples()), 25))
def test_rules_never_crash_on_mangled_examples(index):
    for source in _examples()[index : index + 25]:
        for variant in _variants(source):
            result = check_source(variant, "mangled.py", SETTINGS, RULES, fix=True, unsafe_fixes=True)
            assert result.internal_errors == [], (result.internal_errors, variant)
