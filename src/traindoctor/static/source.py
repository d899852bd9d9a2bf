"""A file's bytes to its source text, lines and tree, or the TD000 finding that says why not.

Bad input never raises: a file that cannot be decoded or parsed becomes one ``TD000`` finding.
The check engine parses every file through :func:`parse`; the runtime doctor reads the script's
own checkpoint facts through it too.
"""

from __future__ import annotations

import ast
import io
import tokenize
import warnings

from traindoctor.finding import Finding, Location, Origin, Severity
from traindoctor.static.context import split_lines
from traindoctor.static.grammar import newer_python_needed, running_python


def parse_error(filename: str, message: str, row: int = 1, column: int = 1, line: str | None = None) -> Finding:
    return Finding(
        code="TD000",
        name="parse-error",
        severity=Severity.ERROR,
        message=message,
        filename=filename,
        location=Location(max(row, 1), max(column, 1)),
        origin=Origin.STATIC,
        source_line=line,
    )


def decode_source(data: bytes) -> str:
    """Decode like the interpreter does (PEP 263 cookie or BOM, else UTF-8)."""
    encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
    text = data.decode(encoding)
    if text.startswith("\ufeff"):
        text = text[1:]
    return text


def parse(filename: str, data: bytes | str) -> tuple[str, list[str], ast.Module] | Finding:
    """Source text, its lines and its tree; or the TD000 finding that explains why not."""
    try:
        source = data if isinstance(data, str) else decode_source(data)
    except (UnicodeDecodeError, LookupError, SyntaxError) as exc:
        return parse_error(filename, f"File is not valid text in its declared encoding ({exc}); it was skipped.")
    if "\x00" in source:
        return parse_error(filename, "File contains null bytes (a binary file?); it was skipped.")
    lines = split_lines(source)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        row = exc.lineno or 1
        text = lines[row - 1].rstrip("\r\n") if 0 < row <= len(lines) else None
        newer = newer_python_needed(text, exc.msg or "")
        if newer is not None:
            version, feature = newer
            message = (
                f"SyntaxError: {exc.msg}; this looks like Python {version} syntax ({feature}) and "
                f"traindoctor runs on Python {running_python()}: run it with Python {version} or "
                "newer to check this file; the file was skipped."
            )
            return parse_error(filename, message, row, exc.offset or 1, text)
        return parse_error(filename, f"SyntaxError: {exc.msg}; the file was skipped.", row, exc.offset or 1, text)
    except (RecursionError, MemoryError):
        return parse_error(filename, "File is nested too deeply for the Python parser; it was skipped.")
    except (ValueError, OverflowError) as exc:
        return parse_error(filename, f"File cannot be parsed ({exc}); it was skipped.")
    return source, lines, tree
