"""The copy-on-write view of the user's folder that a trial runs in.

Training scripts open relative paths (``configurator.py``, ``data/train.bin``, ``out/ckpt.pt``),
so a trial must start where the user runs the script, yet never change the user's files. The
view is a fresh folder in the trial's scratch space that looks like the user's: its folders are
real folders, its files symbolic links to the user's files, except Python sources (up to
:data:`COPY_LIMIT` bytes), which are copied so that paths derived from ``__file__`` stay in the
view. Reading works as in the user's folder, new files land in the view, and renaming or removing
a file renames or removes the link. Writing *through* a link is refused by the operating system
(:mod:`traindoctor.sandbox`); :mod:`traindoctor.sandbox.guard` first replaces the link by a
private copy when the script writes from Python. Hidden folders (``.git``) and folders beyond
:data:`MAX_ENTRIES` entries are linked whole, and replaced by a folder of links when the script
writes inside them.

Scripts also read above the folder they run from (``../data``, ``../../data/%s`` in
pytorch/examples and PyTorch-GAN). With ``parents=N`` the view sits at the same depth below N
mirrored ancestors: each ancestor is a real folder holding links to its other entries, so
``../../data`` in the view reads the user's ``../../data`` (read-only: the links lead out of the
scratch folder, where the sandbox refuses writes).

:class:`View` also maps paths between the two trees: a file argument inside the user's folder
names the same place in the view (never the user's file), and a location reported from the view
(a DataLoader's line) names the user's file again.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: Entries mirrored one by one at most; beyond that, remaining folders are linked whole.
MAX_ENTRIES = 20000
#: Python sources up to this size are copied rather than linked.
COPY_LIMIT = 1 << 20
#: Ancestors mirrored above the view (``../``, ``../../``, ``../../../``) for trials and resume runs.
PARENT_LEVELS = 3
#: Entries of one ancestor linked at most (the rest are left out).
MAX_PARENT_ENTRIES = 2000
#: The key of a ``key=value`` argument (Hydra's ``+a.b=``, ``~a``, ``a/b=``).
_KEY = re.compile(r"[+~]{0,2}[A-Za-z_][\w.\-/]*")


@dataclass(frozen=True)
class View:
    """The user's folder ``project`` seen at ``root`` (both absolute real paths)."""

    project: str
    root: str
    #: The mirrored ancestors' top: (its place in the scratch folder, the user's folder), or None.
    outer: tuple[str, str] | None = None

    def to_view(self, path: str) -> str:
        """``path`` (absolute) inside the user's folder -> the same place in the view; else unchanged."""
        inside = _below(os.path.abspath(path), self.project)
        if inside is None:
            inside = _below(os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path)), self.project)
        return path if inside is None else os.path.join(self.root, inside) if inside else self.root

    def to_user(self, path: str) -> str:
        """``path`` inside the view -> the same place in the user's folder; else unchanged."""
        inside = _below(os.path.abspath(path), self.root)
        if inside is None and self.outer is not None:
            above = _below(os.path.abspath(path), self.outer[0])
            if above is not None:
                return os.path.join(self.outer[1], above) if above else self.outer[1]
        return path if inside is None else os.path.join(self.project, inside) if inside else self.project

    def redirect_args(self, args: Sequence[str], cwd: str) -> list[str]:
        """Command-line arguments (also ``--opt=PATH`` and ``key=PATH``, as Hydra takes them)
        that name existing paths, redirected.

        The run starts at the view of ``cwd``: a path inside the user's folder names the same
        place in the view (a relative one stays relative, an absolute one is mapped into the
        view), a path outside it is made absolute (readable, never writable). Nothing is ever
        rewritten to name the user's own file inside the folder."""
        out = []
        for arg in args:
            head, sep, tail = _split(arg, cwd)
            if tail and not tail.startswith("-") and os.path.lexists(os.path.join(cwd, tail)):
                full = os.path.abspath(os.path.join(cwd, tail))
                mapped = self.to_view(full)
                if mapped == full:  # outside the user's folder
                    tail = full
                elif not os.path.isabs(tail):
                    tail = os.path.relpath(mapped, self.to_view(cwd))
                else:
                    tail = mapped
            out.append(f"{head}{sep}{tail}" if sep else (tail or arg))
        return out


def _split(arg: str, cwd: str) -> tuple[str, str, str]:
    """``--opt=VALUE`` and ``key=VALUE`` -> (option, "=", value); anything else -> ("", "", arg)."""
    if "=" in arg and not os.path.lexists(os.path.join(cwd, arg)):
        head, sep, tail = arg.partition("=")
        if arg.startswith("-") or _KEY.fullmatch(head):
            return head, sep, tail
    return ("", "", arg) if not arg.startswith("-") else (arg, "", "")


def _below(path: str, folder: str) -> str | None:
    """``path`` relative to ``folder`` when it lies inside it ("" for the folder itself), else None."""
    if path == folder:
        return ""
    if path.startswith(folder.rstrip(os.sep) + os.sep):
        return path[len(folder.rstrip(os.sep)) + 1 :]
    return None


def build(
    project: str, root: str, *, skip: Iterable[str] = (), max_entries: int = MAX_ENTRIES, parents: int = 0
) -> View:
    """Build the view of ``project`` at ``root`` (created). Paths in ``skip`` are left out (the
    scratch folder itself when it lives inside the project). With ``parents``, ``root`` holds up to
    that many mirrored ancestors of ``project`` and the view is at their bottom (``View.root``
    is then below ``root``)."""
    source = os.path.realpath(project)
    os.makedirs(root, exist_ok=True)
    base = os.path.realpath(root)
    skipped = {os.path.realpath(s) for s in skip} | {base}
    ancestors = _ancestors(source, parents)
    target = os.path.join(base, *(os.path.basename(a) for a in reversed(ancestors)), os.path.basename(source))
    target = target if ancestors else base
    os.makedirs(target, exist_ok=True)
    skipped.add(target)
    outer = None
    if ancestors:
        _link_ancestors(source, ancestors, target, skipped)
        top = os.path.join(base, os.path.basename(ancestors[-1]))
        outer = (top, ancestors[-1])
    count = 0
    pending: list[tuple[str, str]] = [(source, target)]
    while pending:
        src, dst = pending.pop()
        try:
            entries = list(os.scandir(src))
        except OSError:
            continue
        for entry in entries:
            real = os.path.realpath(entry.path)
            if real in skipped:
                continue
            out = os.path.join(dst, entry.name)
            count += 1
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                if is_dir and not entry.name.startswith(".") and count < max_entries:
                    os.mkdir(out)
                    pending.append((entry.path, out))
                elif _copied(entry):
                    shutil.copy2(real, out)
                else:
                    os.symlink(real, out, target_is_directory=os.path.isdir(real))
            except OSError:
                continue
    return View(source, target, outer)


def _ancestors(source: str, levels: int) -> list[str]:
    """Up to ``levels`` ancestors of ``source``, nearest first, never the file system's root."""
    out: list[str] = []
    here = source
    while len(out) < levels:
        up = os.path.dirname(here)
        if up == here or up == os.path.dirname(up):  # here is "/" or a top-level folder
            break
        out.append(up)
        here = up
    return out


def _link_ancestors(source: str, ancestors: list[str], target: str, skipped: set[str]) -> None:
    """In each mirrored ancestor of ``target``, link the user's ancestor's other entries."""
    child, mirror = source, target
    for ancestor in ancestors:
        mirror = os.path.dirname(mirror)
        try:
            entries = list(os.scandir(ancestor))[:MAX_PARENT_ENTRIES]
        except OSError:
            entries = []
        for entry in entries:
            real = os.path.realpath(entry.path)
            if entry.path == child or real == child or real in skipped or _holds(real, skipped):
                continue
            try:
                os.symlink(real, os.path.join(mirror, entry.name), target_is_directory=os.path.isdir(real))
            except OSError:
                continue
        child = ancestor


def _holds(folder: str, paths: set[str]) -> bool:
    """Whether ``folder`` contains one of ``paths`` (a scratch folder below a linked ancestor)."""
    return any(_below(p, folder) is not None for p in paths)


def _copied(entry: os.DirEntry[str]) -> bool:
    """A Python source small enough to copy (a regular file, not a link)."""
    try:
        return (
            entry.name.endswith(".py") and entry.is_file(follow_symlinks=False) and entry.stat().st_size <= COPY_LIMIT
        )
    except OSError:
        return False
