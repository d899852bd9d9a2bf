"""Check one file's bytes, whatever its kind: a Python source file or a Jupyter notebook.

This is the unit of work the runner hands to worker processes and stores in the cache: it takes
bytes and returns findings plus, when fixing, the new bytes to write. It never writes a file and
never raises for bad input (a file that cannot be read as its kind is one TD000 finding).
"""

from __future__ import annotations

import codecs
import difflib
import io
import tokenize
from dataclasses import dataclass, field

from traindoctor.check.engine import check_source
from traindoctor.check.notebook import NotebookError, is_notebook, read_notebook
from traindoctor.config import Settings
from traindoctor.finding import Finding
from traindoctor.rules.base import Rule
from traindoctor.static.source import parse_error


@dataclass
class FileOutcome:
    """What checking one file produced."""

    filename: str
    findings: list[Finding]
    #: The fixed file's bytes (None: nothing to write).
    new_data: bytes | None = None
    fixes_applied: int = 0
    #: A unified diff of the fixes (only when asked for).
    diff: str = ""
    internal_errors: list[str] = field(default_factory=list)
    #: Other files whose content influenced the findings (sorted absolute paths).
    dependencies: tuple[str, ...] = ()
    #: Served from the cache.
    cached: bool = False


def encode_like(original: bytes, text: str) -> bytes:
    """Encode fixed text with the file's own encoding (and BOM) so nothing else changes."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(original).readline)
    except SyntaxError:
        encoding = "utf-8"
    if encoding == "utf-8-sig" or original.startswith(codecs.BOM_UTF8):
        return codecs.BOM_UTF8 + text.encode("utf-8")
    return text.encode(encoding)


def check_file(
    filename: str,
    data: bytes,
    settings: Settings,
    rules: list[Rule],
    fix: bool = False,
    unsafe_fixes: bool = False,
    diff: bool = False,
) -> FileOutcome:
    """Findings for one file; with ``fix``, also the fixed bytes (and the diff with ``diff``)."""
    if is_notebook(filename):
        return _check_notebook(filename, data, settings, rules, fix, unsafe_fixes, diff)
    result = check_source(data, filename, settings, rules, fix=fix, unsafe_fixes=unsafe_fixes)
    outcome = FileOutcome(
        filename, result.findings, internal_errors=result.internal_errors, dependencies=result.dependencies
    )
    if result.fixed_source is not None and result.original_source is not None:
        outcome.fixes_applied = result.fixes_applied
        outcome.new_data = encode_like(data, result.fixed_source)
        if diff:
            outcome.diff = "".join(
                difflib.unified_diff(
                    result.original_source.splitlines(keepends=True),
                    result.fixed_source.splitlines(keepends=True),
                    fromfile=filename,
                    tofile=filename,
                )
            )
    return outcome


def _check_notebook(
    filename: str,
    data: bytes,
    settings: Settings,
    rules: list[Rule],
    fix: bool,
    unsafe_fixes: bool,
    diff: bool,
) -> FileOutcome:
    try:
        notebook = read_notebook(data)
    except NotebookError as exc:
        report = "TD000" in settings.enabled_codes() and not any(
            "TD000".startswith(i.upper()) for i in settings.ignored_for(filename)
        )
        finding = parse_error(filename, f"Cannot read the notebook: {exc}; it was skipped.")
        return FileOutcome(filename, [finding] if report else [])
    result = check_source(notebook.source, filename, settings, rules, fix=fix, unsafe_fixes=unsafe_fixes)
    outcome = FileOutcome(
        filename,
        [notebook.map_finding(f) for f in result.findings],
        internal_errors=result.internal_errors,
        dependencies=result.dependencies,
    )
    if result.fixed_source is not None:
        changed = notebook.cells_after(result.fixed_source)
        if changed:
            outcome.fixes_applied = result.fixes_applied
            outcome.new_data = notebook.render(changed)
            if diff:
                outcome.diff = notebook.cell_diff(changed, filename)
    return outcome
