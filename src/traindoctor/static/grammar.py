"""Which newer Python a syntax error asks for.

The checker parses with the interpreter it runs on. A file written for a newer Python (``type``
aliases and ``def f[T]`` of 3.12, nested f-string quotes of 3.12, ``except A, B:`` and t-strings
of 3.14, ``except*`` of 3.11, ``match`` of 3.10) is valid code, not a broken file: its TD000
message must say so and name the version, so the user runs traindoctor under that Python instead
of hunting for a typo.
"""

from __future__ import annotations

import re
import sys

#: (version, pattern over the line the parser stopped at, or None, pattern over the message, or None)
_MARKERS: tuple[tuple[tuple[int, int], re.Pattern[str] | None, re.Pattern[str] | None, str], ...] = (
    ((3, 10), re.compile(r"^\s*match\s+[^=]+:\s*(#.*)?$"), None, "`match` statements"),
    ((3, 10), re.compile(r"^\s*case\s+.+:\s*(#.*)?$"), None, "`match` statements"),
    ((3, 11), re.compile(r"^\s*except\s*\*"), None, "`except*`"),
    ((3, 12), re.compile(r"^\s*type\s+[A-Za-z_]\w*\s*[\[=]"), None, "`type` aliases"),
    ((3, 12), re.compile(r"^\s*(?:async\s+)?def\s+[A-Za-z_]\w*\s*\["), None, "type parameter lists"),
    ((3, 12), re.compile(r"^\s*class\s+[A-Za-z_]\w*\s*\["), None, "type parameter lists"),
    ((3, 12), None, re.compile(r"^f-string"), "f-strings that nest quotes, backslashes or comments"),
    # Exception classes only (CapWords, maybe dotted): Python 2's `except ValueError, e:` is not it.
    (
        (3, 14),
        re.compile(r"^\s*except\s+(?:\w+\.)*[A-Z]\w*(?:\s*,\s*(?:\w+\.)*[A-Z]\w*)+\s*:"),
        None,
        "`except` with several exception types without parentheses",
    ),
    ((3, 14), re.compile(r"(?<![\w.'\"])(?:[tT][rR]?|[rR][tT])(?:'|\")"), None, "t-strings"),
)


def newer_python_needed(line: str | None, message: str) -> tuple[str, str] | None:
    """``("3.12", "`type` aliases")`` when the error looks like syntax of a newer Python."""
    text = line or ""
    for version, line_pattern, message_pattern, feature in _MARKERS:
        if sys.version_info[:2] >= version:
            continue
        if line_pattern is not None and line_pattern.search(text):
            return f"{version[0]}.{version[1]}", feature
        if message_pattern is not None and message_pattern.search(message):
            return f"{version[0]}.{version[1]}", feature
    return None


def running_python() -> str:
    return f"{sys.version_info[0]}.{sys.version_info[1]}"
