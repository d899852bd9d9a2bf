"""The package reads bottom-up: no module imports a layer above its own, no import circle anywhere.

Every import counts: module level, inside functions, and under ``TYPE_CHECKING``. The layers, low
to high (the README's architecture section draws the same map):

0. shared types and helpers: ``finding``, ``version``, ``discover``, ...
1. the engines' cores and the user libraries: ``static`` (one file's syntax, the project model),
   ``runtime`` (the session, its probes and events), ``checkpoint``, ``recipes``
2. ``facts``: each topic's facts, static and runtime side by side
3. ``rules``: one module per code
4. ``registry``, ``config``, ``docs``
5. the commands and front ends: ``check``, ``doctor``, ``report``, ``tune``, ``resume``, ``server``,
   ``integrations``, ``checkpoint.cli``, ``cli``

Inside the static core a finer order holds (``protocols``/``names`` -> ``args`` -> ``values`` ->
the file context -> the project model and sources).
"""

from __future__ import annotations

import ast
from pathlib import Path

import traindoctor

SRC = Path(traindoctor.__file__).parent

#: Module prefix -> layer; the longest matching prefix wins.
LAYERS = {
    "traindoctor.finding": 0,
    "traindoctor.version": 0,
    "traindoctor.discover": 0,
    "traindoctor.machine": 0,
    "traindoctor.errors": 0,
    "traindoctor.unwrap": 0,
    "traindoctor.units": 0,
    "traindoctor.static": 1,
    "traindoctor.runtime": 1,
    "traindoctor.checkpoint": 1,
    "traindoctor.recipes": 1,
    "traindoctor.facts": 2,
    "traindoctor.rules": 3,
    "traindoctor.registry": 4,
    "traindoctor.config": 4,
    "traindoctor.docs": 4,
    "traindoctor.check": 5,
    "traindoctor.doctor": 5,
    "traindoctor.report": 5,
    "traindoctor.tune": 5,
    "traindoctor.resume": 5,
    "traindoctor.sandbox": 5,  # the trials' sandbox (tune, verify-resume); only the standard library
    "traindoctor.integrations": 5,
    "traindoctor.server": 5,
    "traindoctor.checkpoint.cli": 5,
    "traindoctor.cli": 5,
    "traindoctor.__main__": 5,
    "traindoctor": 5,
}

#: The static core's own order (a module of ``traindoctor.static`` not named here is level 4).
STATIC_LEVELS = {
    "traindoctor.static.protocols": 0,
    "traindoctor.static.names": 0,
    "traindoctor.static.vocab": 0,
    "traindoctor.static.grammar": 0,
    "traindoctor.static.args": 1,
    "traindoctor.static.values": 2,
    "traindoctor.static.dicts": 3,
    "traindoctor.static.argparse_facts": 3,
    "traindoctor.static.context": 3,
}


def _modules() -> dict[str, tuple[Path, str]]:
    """Every module of the package -> (its file, the package relative imports start from)."""
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        package = ".".join(parts[:-1])
        if parts[-1] == "__init__":
            parts = parts[:-1]
            package = ".".join(parts)
        out[".".join(parts)] = (path, package)
    return out


MODULES = _modules()


def _imports(module: str) -> list[tuple[str, str | None]]:
    """(imported module, imported name or None) for every import statement in ``module``."""
    path, package = MODULES[module]
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:  # ``from pkg import module``
                    out.append((f"{base}.{alias.name}", None))
                else:
                    out.append((base, alias.name))
    return [(m, name) for m, name in out if m in MODULES and m != module]


def layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def _edges() -> dict[str, set[str]]:
    return {m: {o for o, _ in _imports(m)} for m in MODULES}


def test_every_module_has_a_layer() -> None:
    assert all(isinstance(layer(m), int) for m in MODULES)


def test_no_module_imports_a_higher_layer() -> None:
    found = set()
    for module, imported in _edges().items():
        for other in imported:
            if module.startswith(other + "."):
                continue  # a package's own __init__, imported by Python anyway
            if layer(other) > layer(module):
                found.add((module, other))
    assert found == set()


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: set[frozenset[str]] = set()
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.add(frozenset(component))
    return out


def test_no_import_circle() -> None:
    graph = {m: {o for o in imported if not m.startswith(o + ".")} for m, imported in _edges().items()}
    found = _cycles(graph)
    assert found == set()


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == {frozenset({"a", "b", "c"})}
    assert _cycles({"a": {"b"}, "b": set()}) == set()


def test_static_core_reads_bottom_up() -> None:
    def level(module: str) -> int:
        return STATIC_LEVELS.get(module, 4)

    offenders = []
    for module in MODULES:
        if not module.startswith("traindoctor.static."):
            continue
        for other, _ in _imports(module):
            if other.startswith("traindoctor.static.") and level(other) > level(module):
                offenders.append(f"{module} ({level(module)}) imports {other} ({level(other)})")
    assert offenders == []


def test_no_private_name_is_imported_from_another_module() -> None:
    found = set()
    for module in MODULES:
        for other, name in _imports(module):
            if name and name.startswith("_") and not name.startswith("__"):
                found.add((module, f"{other}.{name}"))
    assert found == set()


def test_the_import_reader_sees_imports_inside_functions() -> None:
    # facts/checkpoint/runtime.py parses the script inside a function: such imports count too.
    assert ("traindoctor.static.source", "parse") in _imports("traindoctor.facts.checkpoint.runtime")
    assert layer("traindoctor.check.engine") > layer("traindoctor.rules.base") > layer("traindoctor.facts.data.static")
