"""Check a snippet of source through the real engine with chosen rules (``min_torch_version="2.13"``).

Every helper dedents the snippet, checks it as ``train.py`` unless told otherwise, and asserts the
check had no internal error. They differ in what they return and in the rows: the helpers that
also strip the leading newline (``findings``, ``found``, ``amp_*``, ``checkpoint_*``) count rows from
the snippet's first line, the others from the blank line a triple-quoted snippet starts with.
"""

from __future__ import annotations

import textwrap
from typing import Any

from traindoctor.check.engine import FileResult, check_source, instantiate
from traindoctor.config import Settings
from traindoctor.finding import Finding

AMP_CODES = ["TD301", "TD302", "TD303", "TD304", "TD305", "TD307", "TD308"]
CHECKPOINT_CODES = ["TD501", "TD502", "TD503", "TD504", "TD505", "TD506", "TD507"]
DATA_CODES = ["TD101", "TD102", "TD103", "TD201", "TD601"]
EVAL_CODES = ["TD701", "TD702", "TD703"]


def findings(source: str, codes: list[str]) -> list[Finding]:
    """The findings of ``codes`` on the snippet, rows counted from its first line."""
    source = textwrap.dedent(source).lstrip("\n")
    result = check_source(source, "train.py", Settings(min_torch_version="2.13"), instantiate(codes))
    assert not result.internal_errors, result.internal_errors
    return result.findings


def found(source: str, codes: list[str]) -> list[tuple[str, int]]:
    """Sorted (code, row) of :func:`findings`."""
    return sorted((f.code, f.location.row) for f in findings(source, codes))


def check_findings(src: str, codes: list[str], filename: str = "train.py") -> list[Finding]:
    """The findings of ``codes`` on the dedented snippet, checked as ``filename``."""
    result = check_source(textwrap.dedent(src), filename, Settings(min_torch_version="2.13"), instantiate(codes))
    assert not result.internal_errors
    return result.findings


def check_rows(src: str, codes: list[str], filename: str = "train.py") -> list[tuple[str, int]]:
    """(code, row) of :func:`check_findings`, in the engine's order."""
    return [(f.code, f.location.row) for f in check_findings(src, codes, filename)]


def amp_run(
    src: str, codes: list[str] | None = None, fix: bool = False, min_torch: str = "2.13"
) -> tuple[str, FileResult]:
    """The snippet as checked and the whole result of ``codes`` (the AMP rules by default)."""
    source = textwrap.dedent(src).lstrip("\n")
    result = check_source(
        source, "train.py", Settings(min_torch_version=min_torch), instantiate(codes or AMP_CODES), fix=fix
    )
    assert not result.internal_errors, result.internal_errors
    return source, result


def amp_found(src: str, codes: list[str] | None = None, **kw: Any) -> list[tuple[str, int]]:
    """(code, row) of :func:`amp_run`, in the engine's order."""
    _, result = amp_run(src, codes, **kw)
    return [(f.code, f.location.row) for f in result.findings]


def checkpoint_run(source: str, min_torch: str = "2.13", fix: bool = False, unsafe: bool = False) -> FileResult:
    """The whole result of the checkpoint rules TD501-TD507, fixes as asked."""
    source = textwrap.dedent(source).lstrip("\n")
    result = check_source(
        source,
        "train.py",
        Settings(min_torch_version=min_torch),
        instantiate(CHECKPOINT_CODES),
        fix=fix,
        unsafe_fixes=unsafe,
    )
    assert not result.internal_errors, result.internal_errors
    return result


def checkpoint_found(source: str, **kw: Any) -> list[tuple[str, int]]:
    """Sorted (code, row) of :func:`checkpoint_run`."""
    return sorted((f.code, f.location.row) for f in checkpoint_run(source, **kw).findings)


def data_check(src: str, codes: list[str] = DATA_CODES, filename: str = "train.py", **kw: Any) -> FileResult:
    """The whole result of ``codes`` (the data rules by default); ``kw`` goes to ``check_source``."""
    result = check_source(textwrap.dedent(src), filename, Settings(min_torch_version="2.13"), instantiate(codes), **kw)
    assert not result.internal_errors
    return result


def data_rows(src: str, codes: list[str] = DATA_CODES, filename: str = "train.py") -> list[tuple[str, int]]:
    """(code, row) of :func:`data_check`, in the engine's order."""
    return [(f.code, f.location.row) for f in data_check(src, codes, filename).findings]


def eval_check(src: str, codes: list[str] = EVAL_CODES, **kw: Any) -> FileResult:
    """The whole result of ``codes`` (the evaluation rules by default); ``kw`` goes to ``check_source``."""
    result = check_source(
        textwrap.dedent(src), "train.py", Settings(min_torch_version="2.13"), instantiate(codes), **kw
    )
    assert not result.internal_errors
    return result


def eval_rows(src: str, codes: list[str] = EVAL_CODES) -> list[tuple[str, int]]:
    """(code, row) of :func:`eval_check`, in the engine's order."""
    return [(f.code, f.location.row) for f in eval_check(src, codes).findings]
