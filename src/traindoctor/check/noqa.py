"""Write ``# noqa: TDnnn`` comments: ``traindoctor check --add-noqa`` and the editor's "disable".

A finding is silenced by a ``# noqa`` comment on its first line that names its code (see the check
engine). This module adds such comments: one per line, listing every code found there, merged into
a ``# noqa: X`` comment the line already has (``# noqa: E501`` becomes ``# noqa: E501, TD102``).
Nothing else in the file changes: line endings, encoding, BOM, and for notebooks the JSON around
the cells' sources stay byte for byte as they were. Running it twice changes nothing the second
time, since the first run silenced every finding it could.

A comment cannot go on a line that ends inside a multi-line string (it would become part of the
string) or after a ``\\`` continuation (it would end the statement there): such findings are
reported back as skipped instead. ``TD000`` (the file does not parse) cannot be silenced by noqa.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from traindoctor.check.checkfile import encode_like
from traindoctor.check.engine import NOQA_COMMENT
from traindoctor.check.notebook import NotebookError, is_notebook, read_notebook
from traindoctor.finding import Finding
from traindoctor.static.context import line_ending, split_lines

#: Codes a noqa comment cannot silence (the engine reports them before reading any comment).
UNSILENCEABLE = frozenset({"TD000"})
_LAYOUT_TOKENS = frozenset({tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT})


def split_ending(line: str) -> tuple[str, str]:
    """``"x = 1\\r\\n"`` -> ``("x = 1", "\\r\\n")``."""
    ending = line_ending(line)
    return line[: len(line) - len(ending)], ending


def covered(code: str, listed: Iterable[str]) -> bool:
    """Whether a noqa comment listing ``listed`` silences ``code`` (a listed prefix covers it)."""
    return any(code.startswith(c.upper()) for c in listed)


def with_noqa(line: str, codes: Iterable[str]) -> str:
    """``line`` (ending included) with a noqa comment that covers every one of ``codes``.

    An existing ``# noqa: X`` gets the missing codes appended; a bare ``# noqa`` already covers
    them; otherwise ``  # noqa: A, B`` is added at the end of the line, before its ending.
    """
    body, ending = split_ending(line)
    match = NOQA_COMMENT.search(body)
    if match is not None and not match.group("codes"):
        return line
    listed = re.split(r"[\s,]+", match.group("codes")) if match is not None else []
    missing = sorted({c for c in codes if not covered(c, listed)})
    if not missing:
        return line
    if match is not None:
        at = match.end("codes")
        return body[:at] + ", " + ", ".join(missing) + body[at:] + ending
    return body + "  # noqa: " + ", ".join(missing) + ending


def comment_unsafe_rows(source: str) -> set[int] | None:
    """Rows (1-based) whose end is inside a string or continued by ``\\``; None: no tokens."""
    unsafe: set[int] = set()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Lines split where Python splits them: a CR-only file is many lines, not one.
            for token in tokenize.generate_tokens(iter(split_lines(source) + [""]).__next__):
                if token.type not in _LAYOUT_TOKENS and token.start[0] < token.end[0]:
                    unsafe.update(range(token.start[0], token.end[0]))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    for row, line in enumerate(split_lines(source), start=1):
        if split_ending(line)[0].endswith("\\"):
            unsafe.add(row)
    return unsafe


@dataclass
class NoqaOutcome:
    """What adding noqa comments did: new bytes per file, and the findings it could not silence."""

    #: filename -> the file's new bytes (only files that changed).
    new_data: dict[str, bytes] = field(default_factory=dict)
    #: filename -> how many of its lines got a comment (added or extended).
    added: dict[str, int] = field(default_factory=dict)
    #: (finding, why) for each finding no comment could be written for.
    skipped: list[tuple[Finding, str]] = field(default_factory=list)


def add_noqa(findings: Iterable[Finding], read: Callable[[str], bytes]) -> NoqaOutcome:
    """Silence ``findings`` with noqa comments; ``read(filename)`` gives each file's bytes."""
    outcome = NoqaOutcome()
    by_file: dict[str, list[Finding]] = {}
    for finding in findings:
        if finding.code in UNSILENCEABLE or finding.location is None:
            outcome.skipped.append((finding, "a noqa comment cannot silence it"))
        else:
            by_file.setdefault(finding.filename, []).append(finding)
    for filename, found in by_file.items():
        try:
            data = read(filename)
        except OSError as exc:
            outcome.skipped += [(f, f"the file cannot be read ({exc.strerror or exc})") for f in found]
            continue
        if is_notebook(filename):
            _add_to_notebook(filename, data, found, outcome)
        else:
            _add_to_source(filename, data, found, outcome)
    return outcome


def _rewrite(lines: list[str], findings: list[Finding], unsafe: set[int], outcome: NoqaOutcome) -> list[str]:
    """``lines`` with the comments for ``findings`` (none on ``unsafe`` rows)."""
    codes: dict[int, set[str]] = {}
    for finding in findings:
        row = finding.location.row if finding.location is not None else 0
        if not 1 <= row <= len(lines) or row in unsafe:
            outcome.skipped.append((finding, "its line ends inside a string or a line continuation"))
        else:
            codes.setdefault(row, set()).add(finding.code)
    new = list(lines)
    for row, wanted in codes.items():
        new[row - 1] = with_noqa(lines[row - 1], wanted)
    return new


def _add_to_source(filename: str, data: bytes, findings: list[Finding], outcome: NoqaOutcome) -> None:
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        source = data.decode(encoding)  # "utf-8-sig" drops the BOM; encode_like puts it back
    except (SyntaxError, UnicodeDecodeError, LookupError):
        outcome.skipped += [(f, "the file cannot be decoded") for f in findings]
        return
    unsafe = comment_unsafe_rows(source)
    if unsafe is None:
        outcome.skipped += [(f, "the file cannot be tokenized") for f in findings]
        return
    lines = split_lines(source)
    new = _rewrite(lines, findings, unsafe, outcome)
    changed = sum(a != b for a, b in zip(lines, new))
    if not changed:
        return
    fixed = "".join(new)
    if not _parses(fixed):  # a safety net: a comment must never break the file
        outcome.skipped += [(f, "the comment would break the file") for f in findings]
        return
    outcome.new_data[filename] = encode_like(data, fixed)
    outcome.added[filename] = changed


def _add_to_notebook(filename: str, data: bytes, findings: list[Finding], outcome: NoqaOutcome) -> None:
    try:
        notebook = read_notebook(data)
    except NotebookError as exc:
        outcome.skipped += [(f, str(exc)) for f in findings]
        return
    virtual_unsafe = comment_unsafe_rows(notebook.source)
    if virtual_unsafe is None:
        outcome.skipped += [(f, "the notebook's code cannot be tokenized") for f in findings]
        return
    # Unsafe rows as (cell index, row in cell): the notebook's code is tokenized as one program.
    unsafe = {notebook.cell_location(row) for row in virtual_unsafe}
    changed: dict[int, str] = {}
    count = 0
    for index, cell in enumerate(notebook.cells):
        in_cell = [f for f in findings if f.cell == cell.number]
        if not in_cell:
            continue
        new = _rewrite(cell.lines, in_cell, {row for i, row in unsafe if i == index}, outcome)
        lines_changed = sum(a != b for a, b in zip(cell.lines, new))
        if lines_changed:
            changed[index] = "".join(new)
            count += lines_changed
    known = {cell.number for cell in notebook.cells}
    outcome.skipped += [(f, "its cell is not a code cell") for f in findings if f.cell not in known]
    if changed:
        outcome.new_data[filename] = notebook.render(changed)
        outcome.added[filename] = count


def _parses(source: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True
