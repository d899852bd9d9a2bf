"""Which files ``traindoctor check PATH...`` reads.

Directories are walked for ``*.py``, ``*.pyi`` and ``*.ipynb`` files, skipping the usual
non-source folders (``.venv``, ``build``, ...), traindoctor's own cache, Jupyter's autosave
copies, and whatever the ``.gitignore`` files along the way ignore. A file named explicitly on the
command line is always checked, whatever its extension, as ruff does, unless ``force_exclude``
asks to apply the exclude patterns to it too (what a pre-commit hook, which names every changed
file, needs).

Nothing on the disk stops a scan: a folder that cannot be listed is handed to ``onerror`` and
skipped, and a source file whose kind cannot be told (a symlink loop ``a.py -> b.py -> a.py``,
a file in a folder that cannot be entered) is yielded all the same, so that reading it says why
it cannot be checked. Symbolic links to folders are not followed.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

#: File endings a folder scan picks up.
SOURCE_SUFFIXES = (".py", ".pyi", ".ipynb")
#: Folders never scanned: traindoctor's cache and Jupyter's autosave copies of notebooks.
ALWAYS_SKIPPED = frozenset({".traindoctor_cache", ".ipynb_checkpoints"})


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def _glob_to_regex(glob: str) -> str:
    out = []
    i = 0
    while i < len(glob):
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("/.*")
            i += 3
            continue
        if glob.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = glob.find("]", i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = glob[i + 1 : end].replace("\\", "\\\\")
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append(f"[{body}]")
                i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def parse_gitignore(text: str) -> list[_Pattern]:
    patterns = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        line = line.replace("\\#", "#").replace("\\!", "!")
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        anchored = "/" in line
        line = line.lstrip("/")
        body = _glob_to_regex(line)
        regex = re.compile(("^" if anchored else "^(?:.*/)?") + body + "$")
        patterns.append(_Pattern(regex, negate, dir_only))
    return patterns


class GitIgnore:
    """The .gitignore rules in force below one root; later and deeper rules win."""

    def __init__(self) -> None:
        self._levels: list[tuple[str, list[_Pattern]]] = []

    def push(self, rel_dir: str, folder: Path) -> bool:
        path = folder / ".gitignore"
        try:
            if not path.is_file():
                return False
            patterns = parse_gitignore(path.read_text(encoding="utf-8", errors="replace"))
        except OSError:  # a folder that can be listed but not entered
            return False
        self._levels.append((rel_dir, patterns))
        return True

    def pop(self) -> None:
        self._levels.pop()

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        result = False
        for base, patterns in self._levels:
            if base:
                if not rel_path.startswith(base + "/"):
                    continue
                sub = rel_path[len(base) + 1 :]
            else:
                sub = rel_path
            for p in patterns:
                if p.dir_only and not is_dir:
                    continue
                if p.regex.match(sub):
                    result = not p.negate
        return result


def _excluded(name: str, rel: str, excludes: list[str]) -> bool:
    return any(fnmatch.fnmatch(name, pat) or fnmatch.fnmatch(rel, pat) for pat in excludes)


def force_excluded(path: Path, excludes: list[str], root: Path | None = None) -> bool:
    """Whether an explicitly named file, or a folder above it, matches an exclude pattern.

    Patterns are matched against each component's name and against the path relative to
    ``root`` (the project root) when the file lies inside it, else the path as given.
    """
    if not excludes:
        return False
    rel = path
    if root is not None:
        try:
            rel = path.resolve().relative_to(root.resolve())
        except (ValueError, OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
            rel = path
    parts = rel.parts
    for depth in range(1, len(parts) + 1):
        if _excluded(parts[depth - 1], Path(*parts[:depth]).as_posix(), excludes):
            return True
    return False


#: What a scan does with a folder it cannot list: ``onerror(folder, error)``.
OnError = Callable[[Path, OSError], None]


def iter_python_files(
    paths: list[str],
    excludes: list[str],
    respect_gitignore: bool = True,
    force_exclude: bool = False,
    root: Path | None = None,
    onerror: OnError | None = None,
) -> Iterator[Path]:
    """Files to check, each once, in sorted order per argument.

    A named path that is not a folder is yielded as it is (missing or unreadable: the reader
    reports it), unless it is a special file (a FIFO would block the reader); a folder that cannot
    be listed goes to ``onerror`` (default: skipped silently).
    """
    seen: set[Path] = set()
    for arg in paths:
        root_arg = Path(arg)
        kind = _named_kind(root_arg)
        if kind == "file":
            if force_exclude and root_arg.exists() and force_excluded(root_arg, excludes, root):
                continue
            if root_arg not in seen:
                seen.add(root_arg)
                yield root_arg
            continue
        if kind == "other" or (force_exclude and force_excluded(root_arg, excludes, root)):
            continue
        for path in _walk(root_arg, excludes, respect_gitignore, onerror):
            key = _identity(path)
            if key not in seen:
                seen.add(key)
                yield path


def _named_kind(path: Path) -> Literal["folder", "file", "other"]:
    """How a path named on the command line is taken: ``"folder"`` (scanned), ``"file"`` (read: a
    file, a missing path, or one whose kind cannot be told) or ``"other"`` (a FIFO, a socket, a
    device: nothing to check)."""
    try:
        if path.is_dir():
            return "folder"
        return "file" if path.is_file() or not path.exists() else "other"
    except OSError:  # e.g. below a folder that cannot be entered
        return "file"


def _identity(path: Path) -> Path:
    """The file ``path`` names, for telling two paths to one file apart (itself for a symlink loop)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
        return path.absolute()


def _repo_relative(root: Path) -> tuple[Path | None, str]:
    """The enclosing git repository (if any) and ``root``'s path inside it."""
    absolute = root.resolve()
    for candidate in [absolute, *absolute.parents]:
        if (candidate / ".git").exists():
            rel = absolute.relative_to(candidate).as_posix()
            return candidate, "" if rel == "." else rel
    return None, ""


def _walk(root: Path, excludes: list[str], respect_gitignore: bool, onerror: OnError | None) -> Iterator[Path]:
    ignore = GitIgnore()
    base_rel = ""
    if respect_gitignore:
        repo, base_rel = _repo_relative(root)
        if repo is not None and base_rel:
            # .gitignore files between the repository root and ``root`` apply too.
            parts = base_rel.split("/")
            for depth in range(len(parts)):
                ignore.push("/".join(parts[:depth]), repo.joinpath(*parts[:depth]))

    def visit(folder: Path, rel: str) -> Iterator[Path]:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            if onerror is not None:
                onerror(folder, exc)
            return
        pushed = respect_gitignore and ignore.push(rel, folder)
        for entry in entries:
            child_rel = f"{rel}/{entry.name}" if rel else entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if entry.name in ALWAYS_SKIPPED or _excluded(entry.name, child_rel, excludes):
                continue
            if respect_gitignore and ignore.ignored(child_rel, is_dir):
                continue
            if is_dir:
                yield from visit(Path(entry.path), child_rel)
            elif entry.name.endswith(SOURCE_SUFFIXES) and _is_file(entry):
                yield Path(entry.path)
        if pushed:
            ignore.pop()

    yield from visit(root, base_rel)


def _is_file(entry: os.DirEntry[str]) -> bool:
    """Whether a scanned entry is a file to read: a file or a link to one, and a link whose target
    cannot be told (a loop), so that reading it reports why; not a dangling link."""
    try:
        return entry.is_file()
    except OSError:
        return True
