"""Write a tiny project tree and check one of its files, as a user runs ``traindoctor check train.py``."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

from traindoctor.check.engine import FileResult, check_source, file_context, instantiate
from traindoctor.config import Settings


def write(root: Path, files: dict[str, str]) -> None:
    """Write each dedented text under ``root`` (folders made as needed)."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"))


def check(root: Path, files: dict[str, str], target: str, codes: list[str]) -> FileResult:
    """Write the tree, then check ``target`` alone with ``codes``."""
    write(root, files)
    path = root / target
    result = check_source(path.read_bytes(), str(path), Settings(min_torch_version="2.13"), instantiate(codes))
    assert not result.internal_errors, result.internal_errors
    return result


def rows(result: FileResult) -> list[tuple[str, int]]:
    """(code, row) of a result's findings, in the engine's order."""
    return [(f.code, f.location.row) for f in result.findings]


def checked_rows(root: Path, files: dict[str, str], target: str, codes: list[str]) -> list[tuple[str, int]]:
    """:func:`rows` of :func:`check`."""
    return rows(check(root, files, target, codes))


LOOP = """
for epoch in range(10):
    for x, y in loader:
        loss = model(x.cuda()).sum()
        loss.backward()
"""


def value_at(root: Path, files: dict[str, str], target: str, expr: str) -> object:
    """The value the checker gives the last occurrence of ``expr`` (source text) in ``target``."""
    write(root, files)
    path = root / target
    source = path.read_text()
    ctx = file_context(str(path), source, ast.parse(source), Settings(min_torch_version="2.13"))
    wanted = [n for n in ast.walk(ctx.tree) if isinstance(n, ast.expr) and ast.unparse(n) == expr]
    assert wanted, expr
    node = max(wanted, key=lambda n: (n.lineno, n.col_offset))
    return ctx.value(node)
