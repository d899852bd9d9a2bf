"""The static engine reads bottom-up: no module imports a layer above its own, not even for types.

Layers (low to high): protocols/names -> args -> values -> the file context (context, dicts,
argparse_facts) -> shared analyses (loaders, models, checkpoints, project, ...) -> rules -> engine.
``config`` -> ``registry`` -> ``rules.base`` -> ``static.context`` used to close a cycle back into
``config``; the context now names what it needs from settings and rules as protocols.
"""

from __future__ import annotations

import ast
from pathlib import Path

import traindoctor

SRC = Path(traindoctor.__file__).parent

LAYERS = {
    "traindoctor.finding": 0,
    "traindoctor.static.protocols": 0,
    "traindoctor.static.names": 0,
    "traindoctor.static.args": 1,
    "traindoctor.static.values": 2,
    "traindoctor.static.dicts": 3,
    "traindoctor.static.argparse_facts": 3,
    "traindoctor.static.context": 3,
    "traindoctor.rules": 5,
    "traindoctor.registry": 6,
    "traindoctor.config": 6,
    "traindoctor.check.engine": 7,
    # the check command: it drives the engine
    "traindoctor.check.checkfile": 8,
    "traindoctor.check.cache": 8,
    "traindoctor.check.runner": 8,
    "traindoctor.check.cli": 8,
}
ANALYSIS = 4  # every other module of traindoctor.static


def layer(module: str) -> int | None:
    if not module.startswith("traindoctor."):
        return None
    for name, level in sorted(LAYERS.items(), key=lambda kv: -len(kv[0])):
        if module == name or module.startswith(name + "."):
            return level
    if module.startswith("traindoctor.static."):
        return ANALYSIS
    return None


def imports_of(path: Path, package: str) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            out.append(base)
            out += [f"{base}.{a.name}" for a in node.names]  # ``from pkg import module``
    return out


def test_static_modules_never_import_upwards():
    offenders = []
    for path in sorted((SRC / "static").glob("*.py")):
        module = f"traindoctor.static.{path.stem}"
        own = layer(module)
        for imported in imports_of(path, "traindoctor.static"):
            other = layer(imported)
            if other is not None and other > own and imported in _existing():
                offenders.append(f"{module} (layer {own}) imports {imported} (layer {other})")
    assert offenders == []


def _existing() -> set[str]:
    names = set()
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names.add(".".join(parts))
    return names


def test_rule_base_and_context_do_not_close_the_config_cycle():
    for imported in imports_of(SRC / "static" / "context.py", "traindoctor.static"):
        assert not imported.startswith(("traindoctor.config", "traindoctor.registry", "traindoctor.rules")), imported
