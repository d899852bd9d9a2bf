"""Jupyter notebooks as one program: their code cells joined in order, IPython syntax blanked out.

A notebook runs its cells top to bottom in one namespace, so the checker reads them as one Python
file (the *virtual* source) and maps every location back to ``(cell, row in cell)``. Cells are
numbered as ruff numbers them: 1-based, counting every cell (markdown too), so ``cell 4`` is the
fourth cell on screen. IPython syntax that is not Python is replaced by ``pass`` at the same
indentation (line magics ``%time``, shell escapes ``!ls``, ``x = !ls``, help ``obj?``) and
cell magics (``%%bash``, ``%%writefile``) blank their whole cell, except those whose body is
ordinary Python run once (``%%time``, ``%%capture``, ...), where only the magic line is blanked.

Fixes are made to the virtual source by the engine and written back into the cells' ``source``
values only: every other byte of the notebook's JSON (outputs, metadata, formatting) is kept.
"""

from __future__ import annotations

import ast
import codecs
import difflib
import io
import json
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from traindoctor.finding import Edit, Finding, Fix, Location

#: Cell magics whose body is plain Python executed once, like a normal cell.
PYTHON_BODY_CELL_MAGICS = frozenset({"time", "capture", "prun", "debug", "timeit"})

_WS = re.compile(r"[ \t\n\r]*")
#: Reads one JSON string from just after its opening quote: (the string, the index after it).
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]  # typeshed declares it in _json only
#: Lines that may be IPython-only syntax (checked further only when the cell does not parse).
_MAGIC_START = re.compile(r"^\s*[%!?]")
_MAGIC_ASSIGN = re.compile(r"^\s*[A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*=\s*[%!]")
_HELP_SUFFIX = re.compile(r"^\s*[A-Za-z_*][\w.*]*\?{1,2}\s*$")  # ``obj?``, ``torch.*Tensor?``
_LEADING_INDENT = re.compile(r"^[ \t]+")


class NotebookError(ValueError):
    """The file is not a notebook this checker can read (reported as TD000)."""


def _lines(text: str) -> list[str]:
    """Lines with their endings, split where Python's tokenizer splits them."""
    return io.StringIO(text, newline="").readlines()


@dataclass
class CodeCell:
    #: 1-based position among all cells of the notebook.
    number: int
    #: The raw JSON text span of this cell's ``source`` value.
    span: tuple[int, int]
    #: The cell's source as one string.
    text: str
    lines: list[str]
    #: The cell's last line had no newline; one was added in the virtual source.
    added_newline: bool = False
    #: Indentation IPython strips from a cell whose first line is indented (its
    #: ``leading_indent`` transform): removed from each line that starts with it.
    indent: str = ""


@dataclass
class Notebook:
    """A parsed notebook: its raw JSON text, its code cells and the joined virtual source."""

    raw: str
    bom: bool
    cells: list[CodeCell]
    source: str = ""
    #: The virtual source's lines.
    lines: list[str] = field(default_factory=list)
    #: For virtual row ``i + 1``: (index into ``cells``, 1-based row in that cell).
    rows: list[tuple[int, int]] = field(default_factory=list)
    #: For virtual row ``i + 1``: the cell's own line (differs from the virtual one for magics).
    originals: list[str] = field(default_factory=list)
    #: For virtual row ``i + 1``: columns the virtual line lost to a stripped leading indent.
    shifts: list[int] = field(default_factory=list)

    # -- locations ------------------------------------------------------------------------
    def cell_location(self, row: int) -> tuple[int, int]:
        """Virtual row -> (index into ``cells``, row in that cell); past the end: after the last."""
        if 1 <= row <= len(self.rows):
            return self.rows[row - 1]
        if not self.rows:
            return 0, 1
        index, last = self.rows[-1]
        return index, last + 1

    def map_finding(self, finding: Finding) -> Finding:
        """The finding with its cell and rows within that cell (its fix's edits too)."""
        if finding.location is None:
            return finding
        index, row = self.cell_location(finding.location.row)
        shift = self._shift
        changes: dict[str, Any] = {
            "cell": self.cells[index].number if self.cells else 1,
            "location": Location(row, finding.location.column + shift(finding.location.row)),
        }
        end = finding.end_location
        if end is not None:
            end_index, end_row = self.cell_location(end.row)
            changes["end_location"] = Location(end_row, end.column + shift(end.row)) if end_index == index else None
        if finding.fix is not None:
            edits: list[Edit] = []
            for edit in finding.fix.edits:
                (a, ra), (b, rb) = self.cell_location(edit.location.row), self.cell_location(edit.end_location.row)
                if a != index or b != index:
                    changes["fix"] = None  # an edit outside the finding's cell: no fix
                    break
                edits.append(
                    Edit(
                        edit.content,
                        Location(ra, edit.location.column + shift(edit.location.row)),
                        Location(rb, edit.end_location.column + shift(edit.end_location.row)),
                    )
                )
            else:
                changes["fix"] = Fix(finding.fix.message, tuple(edits), finding.fix.applicability)
        return finding.with_(**changes)

    def _shift(self, row: int) -> int:
        return self.shifts[row - 1] if 1 <= row <= len(self.shifts) else 0

    # -- writing fixes back ---------------------------------------------------------------
    def cells_after(self, fixed_source: str) -> dict[int, str]:
        """Index into ``cells`` -> new text, for the cells the fixed virtual source changes."""
        before = self.lines
        after = _lines(fixed_source)
        per_cell: list[list[str]] = [[] for _ in self.cells]
        matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                for k in range(i2 - i1):
                    per_cell[self.rows[i1 + k][0]].append(self.originals[i1 + k])
            elif tag == "replace":
                owners = [self.rows[k][0] for k in range(i1, i2)]
                if i2 - i1 == j2 - j1:
                    for k in range(i2 - i1):
                        per_cell[owners[k]].append(self._restore(i1 + k, after[j1 + k]))
                else:
                    per_cell[owners[0]].extend(self._reindent(owners[0], after[j1:j2]))
            elif tag == "insert":
                owner = self.rows[i1 - 1][0] if i1 > 0 else 0
                per_cell[owner].extend(self._reindent(owner, after[j1:j2]))
        changed: dict[int, str] = {}
        for index, cell in enumerate(self.cells):
            text = "".join(per_cell[index])
            if cell.added_newline and text.endswith("\n"):
                text = text[:-1]
            if text != cell.text:
                changed[index] = text
        return changed

    def _restore(self, k: int, new_line: str) -> str:
        """A line the fix left as it was keeps its original (magic) text; a changed line of a
        dedented cell gets the cell's indentation back."""
        if new_line == self.lines[k]:
            return self.originals[k]
        return self._reindent(self.rows[k][0], [new_line])[0] if self.shifts[k] else new_line

    def _reindent(self, index: int, lines: list[str]) -> list[str]:
        indent = self.cells[index].indent if self.cells else ""
        return [indent + line if indent and line.strip() else line for line in lines]

    def render(self, changed: dict[int, str]) -> bytes:
        """The notebook's bytes with the changed cells' ``source`` rewritten, nothing else."""
        out = self.raw
        for index in sorted(changed, key=lambda i: self.cells[i].span[0], reverse=True):
            start, end = self.cells[index].span
            out = out[:start] + _encode_source(out[start:end], changed[index], out, start) + out[end:]
        data = out.encode("utf-8")
        return codecs.BOM_UTF8 + data if self.bom else data

    def cell_diff(self, changed: dict[int, str], filename: str) -> str:
        parts = []
        for index in sorted(changed):
            cell = self.cells[index]
            part = "".join(
                difflib.unified_diff(
                    cell.text.splitlines(keepends=True),
                    changed[index].splitlines(keepends=True),
                    fromfile=f"{filename}:cell {cell.number}",
                    tofile=f"{filename}:cell {cell.number}",
                )
            )
            parts.append(part if part.endswith("\n") else part + "\n")
        return "".join(parts)


def _encode_source(raw_value: str, text: str, document: str, start: int) -> str:
    """JSON for ``text`` in the style of the value it replaces (list of lines or one string)."""
    ascii_only = "\\u" in raw_value and raw_value.isascii()

    def dump(line: str) -> str:
        return json.dumps(line, ensure_ascii=ascii_only)

    if raw_value.lstrip().startswith('"'):
        return dump(text)
    lines = _lines(text)
    if not lines:
        return "[]"
    inner = raw_value[1:-1]
    if inner.strip():
        first = inner.index('"')
        prefix = inner[:first]  # between '[' and the first line
        suffix = inner[len(inner.rstrip()) :]  # before ']'
        _, after_first = _scanstring(inner, first + 1)
        second = inner.find('"', after_first)
        separator = inner[after_first:second] if second != -1 else "," + prefix
    else:  # an empty list: indent like nbformat (one more space than the "source" key's line)
        line_start = document.rfind("\n", 0, start) + 1
        indent = cast("re.Match[str]", re.match(r"[ \t]*", document[line_start:])).group(0)  # ``*``: it matches
        newline = "\r\n" if document[line_start - 2 : line_start] == "\r\n" else "\n"
        prefix, suffix = f"{newline}{indent} ", f"{newline}{indent}"
        separator = "," + prefix
    return "[" + prefix + separator.join(dump(line) for line in lines) + suffix + "]"


# -- reading ------------------------------------------------------------------------------------
def _skip(text: str, i: int) -> int:
    return cast("re.Match[str]", _WS.match(text, i)).end()  # ``*`` matches the empty string too


def _object(text: str, i: int, on_member: Callable[[str, int], int]) -> int:
    """Walk the JSON object at ``i``; ``on_member(key, value_start)`` returns the value's end."""
    i = _skip(text, i)
    if text[i] != "{":
        raise NotebookError("expected an object")
    i = _skip(text, i + 1)
    if text[i] == "}":
        return i + 1
    while True:
        if text[i] != '"':
            raise NotebookError("expected a key")
        key, i = _scanstring(text, i + 1)
        i = _skip(text, i)
        if text[i] != ":":
            raise NotebookError("expected ':'")
        i = _skip(text, on_member(key, _skip(text, i + 1)))
        if text[i] == "}":
            return i + 1
        if text[i] != ",":
            raise NotebookError("expected ',' or '}'")
        i = _skip(text, i + 1)


def _source_spans(text: str) -> dict[int, tuple[int, int]]:
    """Cell index -> raw span of its ``source`` value, found by walking the JSON text once."""
    decoder = json.JSONDecoder()
    spans: dict[int, tuple[int, int]] = {}

    def skip_value(start: int) -> int:
        return decoder.raw_decode(text, start)[1]

    def cells_array(start: int) -> int:
        if text[start] != "[":
            return skip_value(start)
        i = _skip(text, start + 1)
        if text[i] == "]":
            return i + 1
        index = 0
        while True:

            def cell_member(key: str, value_start: int, index: int = index) -> int:
                end = skip_value(value_start)
                if key == "source":
                    spans[index] = (value_start, end)
                return end

            i = _skip(text, _object(text, i, cell_member))
            index += 1
            if text[i] == "]":
                return i + 1
            if text[i] != ",":
                raise NotebookError("expected ',' or ']'")
            i = _skip(text, i + 1)

    _object(text, 0, lambda key, start: cells_array(start) if key == "cells" else skip_value(start))
    return spans


def _cell_magic(first_line: str) -> str | None:
    stripped = first_line.strip()
    if not stripped.startswith("%%"):
        return None
    return stripped[2:].split(None, 1)[0] if stripped[2:].strip() else ""


def _parses(text: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return True


def _blank_magics(lines: list[str]) -> list[str]:
    """The cell's lines with IPython-only syntax blanked (see the module docstring)."""
    first = next((line for line in lines if line.strip()), "")
    magic = _cell_magic(first)
    if magic is None:
        return _blank_line_magics(lines)
    keep_body = magic in PYTHON_BODY_CELL_MAGICS
    out, seen = [], False
    for line in lines:
        if not seen and line.strip():
            seen = True
            out.append("\n")
        else:
            out.append(line if keep_body else "\n")
    return _blank_line_magics(out) if keep_body else out


def _blank_line_magics(lines: list[str]) -> list[str]:
    """Replace line magics, shell escapes and help lines by ``pass``; only if the cell needs it.

    A cell that parses as Python has none (``%`` at a line start is then an operator in a
    continued expression), so it is left alone.
    """
    if not any(_looks_magic(line) for line in lines) or _parses("".join(lines)):
        return lines
    out = []
    continuing = False
    for line in lines:
        if continuing or _looks_magic(line):
            indent = line[: len(line) - len(line.lstrip(" \t"))]
            out.append("\n" if continuing else f"{indent}pass\n")
            continuing = line.rstrip("\r\n").endswith("\\")
        else:
            out.append(line)
    return out


def _strip_leading_indent(lines: list[str]) -> tuple[list[str], str]:
    """IPython's ``leading_indent`` transform: a cell whose first line is indented runs with
    that indentation removed from every line that starts with it (`` x = 1`` is a valid cell).
    Only applied to a cell that does not parse as it is."""
    match = _LEADING_INDENT.match(lines[0]) if lines else None
    if match is None or _parses("".join(lines)):
        return lines, ""
    indent = match.group(0)
    n = len(indent)
    return [line[n:] if line.startswith(indent) else line for line in lines], indent


def _looks_magic(line: str) -> bool:
    return bool(_MAGIC_START.match(line) or _MAGIC_ASSIGN.match(line) or _HELP_SUFFIX.match(line))


def _other_language(cell: dict[str, object]) -> bool:
    """A code cell its editor marks as another language (VS Code's ``"languageId": "plaintext"``
    for pasted training logs, ``"markdown"``, ``"shellscript"``): not Python, not checked."""
    metadata = cell.get("metadata")
    editor = metadata.get("vscode") if isinstance(metadata, dict) else None
    language = editor.get("languageId") if isinstance(editor, dict) else None
    return isinstance(language, str) and language.lower() not in ("python", "python3", "ipython")


def read_notebook(data: bytes) -> Notebook:
    """Parse a notebook's bytes; raise :class:`NotebookError` with a reason when it cannot be read."""
    bom = data.startswith(codecs.BOM_UTF8)
    try:
        raw = data.decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as exc:
        raise NotebookError(f"notebook is not UTF-8 text ({exc})") from exc
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise NotebookError(f"notebook is not valid JSON ({exc})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
        raise NotebookError("notebook has no 'cells' list (nbformat 4 is expected)")
    try:
        spans = _source_spans(raw)
    except (NotebookError, ValueError, IndexError, RecursionError, StopIteration) as exc:
        raise NotebookError(f"notebook JSON could not be walked ({exc})") from exc
    notebook = Notebook(raw, bom, [])
    virtual: list[str] = []
    for position, cell in enumerate(doc["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code" or _other_language(cell):
            continue
        source = cell.get("source", "")
        if isinstance(source, list) and all(isinstance(s, str) for s in source):
            text = "".join(source)
        elif isinstance(source, str):
            text = source
        else:
            raise NotebookError(f"cell {position + 1}: 'source' is neither text nor a list of lines")
        if position not in spans:
            continue  # a code cell without source: nothing to check
        lines = _lines(text)
        code = CodeCell(position + 1, spans[position], text, lines)
        if lines and not lines[-1].endswith(("\n", "\r")):
            lines = lines[:-1] + [lines[-1] + "\n"]
            code.added_newline = True
        index = len(notebook.cells)
        notebook.cells.append(code)
        blanked = _blank_magics(lines)
        blanked, code.indent = _strip_leading_indent(blanked)
        for row, (original, line) in enumerate(zip(lines, blanked), start=1):
            notebook.rows.append((index, row))
            notebook.originals.append(original)
            notebook.shifts.append(len(code.indent) if code.indent and original.startswith(code.indent) else 0)
            virtual.append(line)
    notebook.lines = virtual
    notebook.source = "".join(virtual)
    return notebook


def is_notebook(filename: str) -> bool:
    return filename.endswith(".ipynb")
