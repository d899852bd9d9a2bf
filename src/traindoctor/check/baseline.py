"""Baselines: record today's findings once, then report only the ones that are new.

``traindoctor check --write-baseline FILE`` writes every finding of the run to FILE (JSON, sorted,
meant to be committed); ``traindoctor check --baseline FILE`` then reports only the findings that
FILE does not hold. A finding matches a baseline entry by its code, its file (relative to the
project root, so the baseline works from any folder and on any machine) and a *fingerprint*: a
hash of its source line and of the nearest non-blank line above and below it, each with its
whitespace normalised. The row number is not part of it, so lines added or removed elsewhere do
not resurrect old findings and a moved block keeps matching; editing the finding's line (or a
neighbour) makes it new. Identical findings with identical context are counted: a baseline with
two of them lets two through, a third is new.

The entries' ``line`` and ``message`` are there for people reading the file; matching ignores them.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from traindoctor.check.notebook import NotebookError, is_notebook, read_notebook
from traindoctor.check.writer import write_atomically
from traindoctor.finding import Finding
from traindoctor.static.context import split_lines
from traindoctor.static.source import decode_source

#: The file's format version (the key ``traindoctor-baseline`` holds it).
FORMAT = 1


class BaselineError(ValueError):
    """A baseline file that cannot be read or written (a usage error)."""


@dataclass(frozen=True)
class Entry:
    """One recorded finding; ``(file, code, fingerprint)`` is what matches."""

    file: str
    code: str
    fingerprint: str
    line: int = field(default=0, compare=False)
    message: str = field(default="", compare=False)
    cell: int | None = field(default=None, compare=False)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.file, self.code, self.fingerprint)

    def to_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"file": self.file, "code": self.code, "fingerprint": self.fingerprint}
        if self.cell is not None:
            data["cell"] = self.cell
        data["line"] = self.line
        data["message"] = self.message
        return data


def file_key(filename: str, root: Path | None) -> str:
    """The file as a baseline names it: relative to the project root, ``/``-separated."""
    path = Path(filename)
    if root is not None:
        try:
            return path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            pass
    return path.as_posix()


def _normalised(line: str) -> str:
    return " ".join(line.split())


def fingerprint(lines: list[str], row: int) -> str:
    """Hash of line ``row`` (1-based) and its nearest non-blank neighbours, whitespace normalised."""
    if not 1 <= row <= len(lines):
        return hashlib.blake2b(b"", digest_size=8).hexdigest()
    above = next((_normalised(l) for l in reversed(lines[: row - 1]) if l.strip()), "")
    below = next((_normalised(l) for l in lines[row:] if l.strip()), "")
    text = "\n".join((above, _normalised(lines[row - 1]), below))
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


class SourceLines:
    """The lines findings' rows count in (a file's, or a notebook cell's), read once per file."""

    def __init__(self, read: Callable[[str], bytes]) -> None:
        self._read = read
        self._files: dict[str, dict[int | None, list[str]]] = {}

    def of(self, filename: str, cell: int | None) -> list[str]:
        if filename not in self._files:
            self._files[filename] = self._load(filename)
        return self._files[filename].get(cell, [])

    def _load(self, filename: str) -> dict[int | None, list[str]]:
        try:
            data = self._read(filename)
            if is_notebook(filename):
                return {cell.number: list(cell.lines) for cell in read_notebook(data).cells}
            return {None: split_lines(decode_source(data))}
        except (OSError, NotebookError, UnicodeDecodeError, LookupError, SyntaxError):
            return {}  # unreadable: every finding of it gets the empty context


def entry_for(finding: Finding, root: Path | None, lines: SourceLines) -> Entry:
    row = finding.location.row if finding.location is not None else 0
    return Entry(
        file=file_key(finding.filename, root),
        code=finding.code,
        fingerprint=fingerprint(lines.of(finding.filename, finding.cell), row),
        line=row,
        message=finding.message,
        cell=finding.cell,
    )


@dataclass
class Comparison:
    """Today's findings against a baseline."""

    #: Findings the baseline does not hold (reported).
    new: list[Finding]
    #: Baseline entries that matched a finding of today.
    matched: list[Entry]
    #: Baseline entries of the files checked today that matched nothing (fixed since).
    gone: list[Entry]
    #: Baseline entries of files not checked today (kept as they are).
    elsewhere: list[Entry]


class Baseline:
    """The entries of one baseline file."""

    def __init__(self, entries: Iterable[Entry]) -> None:
        self.entries = list(entries)

    @classmethod
    def load(cls, path: str) -> Baseline:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise BaselineError(f"baseline file not found: {path} (write one with --write-baseline)") from None
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise BaselineError(f"cannot read the baseline {path}: {exc}") from exc
        if not isinstance(data, dict) or data.get("traindoctor-baseline") != FORMAT:
            raise BaselineError(f"{path} is not a traindoctor baseline (format {FORMAT})")
        try:
            entries = [
                Entry(
                    file=str(e["file"]),
                    code=str(e["code"]),
                    fingerprint=str(e["fingerprint"]),
                    line=int(e.get("line", 0)),
                    message=str(e.get("message", "")),
                    cell=int(e["cell"]) if e.get("cell") is not None else None,
                )
                for e in data["findings"]
            ]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise BaselineError(f"{path}: malformed baseline entry ({exc})") from exc
        return cls(entries)

    def compare(
        self, findings: list[Finding], root: Path | None, lines: SourceLines, checked: Iterable[str]
    ) -> Comparison:
        """Split ``findings`` into new ones and matched entries (``checked``: the files read today)."""
        left = Counter(e.key for e in self.entries)
        new: list[Finding] = []
        matched: list[Entry] = []
        for finding in findings:
            entry = entry_for(finding, root, lines)
            if left[entry.key] > 0:
                left[entry.key] -= 1
                matched.append(entry)
            else:
                new.append(finding)
        today = {file_key(name, root) for name in checked} | {file_key(f.filename, root) for f in findings}
        gone: list[Entry] = []
        elsewhere: list[Entry] = []
        for entry in self.entries:
            if left[entry.key] > 0:
                left[entry.key] -= 1
                (gone if entry.file in today else elsewhere).append(entry)
        return Comparison(new, matched, gone, elsewhere)


def write(path: str, entries: Iterable[Entry]) -> None:
    """Write a baseline file (sorted, one entry per finding); raise BaselineError on failure."""
    ordered = sorted(entries, key=lambda e: (e.file, e.cell or 0, e.line, e.code, e.fingerprint, e.message))
    payload = {"traindoctor-baseline": FORMAT, "findings": [e.to_dict() for e in ordered]}
    data = (json.dumps(payload, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    target = Path(path)
    try:
        if target.exists():
            write_atomically(target, data)
        else:
            target.write_bytes(data)
    except OSError as exc:
        raise BaselineError(f"cannot write the baseline {path}: {exc.strerror or exc}") from exc
