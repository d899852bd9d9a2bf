"""Rule discovery and ``--select`` / ``--ignore`` prefix expansion.

Rules are found by walking the ``traindoctor.rules`` package: adding a rule means adding one
module. Nothing here imports torch; rule modules must not import it at module level either
(runtime halves import it lazily inside their hooks).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Iterable
from functools import cache

from traindoctor.discover import classes_defined_in
from traindoctor.rules.base import Rule


class UnknownCodeError(ValueError):
    """Raised for a --select/--ignore entry that matches no rule."""


def _is_rule_leaf(leaf: str) -> bool:
    return leaf.startswith("td") and leaf[2:5].isdigit()


def iter_rule_modules() -> Iterable[str]:
    """Names of the rule modules, ``traindoctor.rules.<topic>.tdNNN_<name>``.

    Listed from the package folders directly (a watched run does this at start-up, and
    ``pkgutil.walk_packages`` costs a millisecond more); ``pkgutil`` for an installation that is
    not plain folders (a zip).
    """
    import traindoctor.rules as pkg

    roots = list(pkg.__path__)
    if not all(os.path.isdir(root) for root in roots):  # pragma: no cover - zipped install
        for info in pkgutil.walk_packages(roots, prefix=pkg.__name__ + "."):
            if _is_rule_leaf(info.name.rsplit(".", 1)[-1]):
                yield info.name
        return
    for root in roots:
        for topic in sorted(os.listdir(root)):
            folder = os.path.join(root, topic)
            if not topic.isidentifier() or not os.path.isfile(os.path.join(folder, "__init__.py")):
                continue
            stems = set()  # sources, or a sourceless install's .pyc files
            for fname in os.listdir(folder):
                stem, ext = os.path.splitext(fname)
                if ext in (".py", ".pyc") and _is_rule_leaf(stem) and stem.isidentifier():
                    stems.add(stem)
            for stem in sorted(stems):
                yield f"{pkg.__name__}.{topic}.{stem}"


@cache
def all_rules() -> tuple[type[Rule], ...]:
    """Every rule class, sorted by code. Each code appears exactly once."""
    found: dict[str, type[Rule]] = {}
    for modname in sorted(iter_rule_modules()):
        for obj in classes_defined_in(importlib.import_module(modname), Rule):
            if not obj.code:
                continue
            if obj.code in found and found[obj.code] is not obj:
                raise RuntimeError(f"rule code {obj.code} defined twice: {modname}")
            found[obj.code] = obj
    return tuple(found[c] for c in sorted(found))


@cache
def rules_by_code() -> dict[str, type[Rule]]:
    return {r.code: r for r in all_rules()}


def get_rule(code_or_name: str) -> type[Rule] | None:
    key = code_or_name.strip()
    by_code = rules_by_code()
    if key.upper() in by_code:
        return by_code[key.upper()]
    for rule in all_rules():
        if rule.name == key.lower():
            return rule
    return None


def _matches(code: str, prefix: str) -> bool:
    return prefix == "ALL" or code.startswith(prefix)


def _normalise(prefixes: Iterable[str]) -> list[str]:
    out = []
    for raw in prefixes:
        p = raw.strip().upper()
        if not p:
            continue
        if p != "ALL" and not any(_matches(r.code, p) for r in all_rules()):
            raise UnknownCodeError(f"unknown rule selector: {raw!r}")
        out.append(p)
    return out


def select_codes(
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    extend_select: Iterable[str] | None = None,
) -> set[str]:
    """Expand prefixes into the set of enabled codes.

    With no ``select``, every rule with ``default_enabled`` is on. A code is off when an ignore
    prefix matches it, unless a *longer* select prefix matches it too (the more specific wins).
    """
    sel = _normalise(select) if select else None
    ext = _normalise(extend_select or [])
    ign = _normalise(ignore or [])
    enabled: set[str] = set()
    for rule in all_rules():
        sel_len = -1
        if sel is None:
            if rule.default_enabled:
                sel_len = 0
        else:
            sel_len = max((len(p) for p in sel if _matches(rule.code, p)), default=-1)
        sel_len = max([sel_len] + [len(p) for p in ext if _matches(rule.code, p)])
        if sel_len < 0:
            continue
        ign_len = max((len(p) for p in ign if _matches(rule.code, p)), default=-1)
        if ign_len >= 0 and ign_len >= sel_len:
            continue
        enabled.add(rule.code)
    return enabled
