"""The result cache: an unchanged file is not checked again.

One JSON file per *fingerprint* in the ``entries/`` subfolder of the cache folder (default
``.traindoctor_cache/`` in the project root). The fingerprint covers everything besides the file
itself that decides its findings: traindoctor's version and its own source files (so editing a
rule invalidates it even without a version bump), the Python version (the ``ast`` differs), and
every analysis setting (selected codes, per-file ignores, minimum torch, thresholds, ...).
Inside, each checked file has an entry keyed by its absolute path: the hash of its content, the
content hashes of the project files its analysis read (``project_dependencies``: imported
modules, config files), and its findings. An entry is used only when the file and every
dependency still hash the same.

The cache owns only what it made. Its folder holds a ``.gitignore`` (``*``), a ``CACHEDIR.TAG``
and ``entries/``, which a marker file (:data:`MARKER_NAME`) names as the cache's; it deletes
only ``<fingerprint>.json`` files there (it keeps the newest :data:`KEEP`). A folder that holds
anything else and has no marker is refused (:class:`CacheFolderError`): the cache never writes
into, nor prunes, a folder of the user's. A folder that only holds what an older traindoctor's
cache made there (entries next to the tag) is taken over and its old entries removed.

The cache is data, never code: JSON only, and findings are rebuilt only from traindoctor's own
finding classes. A missing, unreadable, corrupt or foreign cache file is ignored and rebuilt;
a folder that cannot be listed or written is skipped silently. Writes are atomic (temporary
file, rename).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from traindoctor.config import Settings
from traindoctor.errors import UsageError
from traindoctor.finding import Finding
from traindoctor.version import __version__

CACHE_DIR_NAME = ".traindoctor_cache"
#: The subfolder of the cache folder that holds the entries.
ENTRIES_DIR = "entries"
#: The file in :data:`ENTRIES_DIR` that names the folder as the cache's.
MARKER_NAME = "TRAINDOCTOR_CACHE"
#: How many fingerprint files to keep (each a different settings combination).
KEEP = 8
_FORMAT = 1
#: Settings that choose which files are checked, not what a file's findings are.
_NOT_ANALYSIS = frozenset({"exclude", "extend_exclude", "respect_gitignore", "force_exclude", "cache_dir"})
_MARKER_TEXT = (
    "traindoctor check cache\n"
    "# This folder holds the entries of traindoctor check's cache (<fingerprint>.json).\n"
    "# traindoctor deletes only those files here; delete the whole cache folder to clear it.\n"
)
_GITIGNORE_TEXT = "# Created by traindoctor automatically.\n*\n"
_TAG_TEXT = (
    "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by traindoctor.\n"
)
#: An entry file (a fingerprint: 32 hex digits) and a temporary file of the cache's.
_ENTRY = re.compile(r"[0-9a-f]{32}\.json")
_TEMPORARY = re.compile(r"\.tmp-.+")


class CacheFolderError(UsageError):
    """The cache folder is not one the cache may use: it holds files the cache did not make."""


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _code_stamp() -> str:
    """Size and mtime of every traindoctor source file: edits to a rule invalidate the cache."""
    root = Path(__file__).resolve().parent.parent
    parts: list[str] = []
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name == "__pycache__":
                continue
            try:
                if entry.is_dir():
                    stack.append(entry.path)
                elif entry.name.endswith(".py"):
                    st = entry.stat()
                    parts.append(f"{entry.path}:{st.st_size}:{st.st_mtime_ns}")
            except OSError:
                continue
    return content_hash("\n".join(sorted(parts)).encode())


def fingerprint(settings: Settings) -> str:
    """Everything besides the file that decides its findings, hashed."""
    analysis = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings) if f.name not in _NOT_ANALYSIS}
    data = {
        "format": _FORMAT,
        "version": __version__,
        "code": _code_stamp(),
        "python": list(sys.version_info[:2]),
        "settings": analysis,
        "codes": sorted(settings.enabled_codes()),
        "min_torch": list(settings.min_torch or ()),
    }
    return content_hash(json.dumps(data, sort_keys=True, default=str).encode())


# -- findings <-> JSON ----------------------------------------------------------------------------
def _encode(value: Any) -> Any:
    cls: type
    if isinstance(value, enum.Enum):
        cls = type(value)
        return {"__enum__": f"{cls.__module__}:{cls.__qualname__}", "value": value.value}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        fields = {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"__dc__": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v) for v in value]}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value) and not ({"__enum__", "__dc__", "__tuple__"} & set(value)):
            return {k: _encode(v) for k, v in value.items()}
        raise TypeError("dict with non-string keys")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot cache a {type(value).__name__}")


def _traindoctor_class(name: str) -> type:
    """A class of an already-imported traindoctor module, by ``module:qualname`` (nothing else)."""
    module_name, _, qualname = name.partition(":")
    if not (module_name == "traindoctor" or module_name.startswith("traindoctor.")):
        raise ValueError(f"not a traindoctor class: {name}")
    module = sys.modules.get(module_name)
    if module is None or "." in qualname:
        raise ValueError(f"unknown class: {name}")
    cls = getattr(module, qualname, None)
    if not isinstance(cls, type):
        raise ValueError(f"unknown class: {name}")
    return cls


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if "__tuple__" in value:
            return tuple(_decode(v) for v in value["__tuple__"])
        if "__enum__" in value:
            cls = _traindoctor_class(value["__enum__"])
            if not issubclass(cls, enum.Enum):
                raise ValueError("not an enum")
            return cls(value["value"])
        if "__dc__" in value:
            cls = _traindoctor_class(value["__dc__"])
            if not dataclasses.is_dataclass(cls):
                raise ValueError("not a dataclass")
            known = {f.name for f in dataclasses.fields(cls) if f.init}
            fields = value["fields"]
            if not set(fields) <= known:
                raise ValueError("fields changed")
            return cls(**{k: _decode(v) for k, v in fields.items()})
        return {k: _decode(v) for k, v in value.items()}
    return value


# -- the cache -----------------------------------------------------------------------------------
class Cache:
    """Entries of one fingerprint, loaded at start and saved (when changed) at the end."""

    def __init__(self, directory: Path, key: str) -> None:
        self.directory = directory
        self.key = key
        self.path = directory / ENTRIES_DIR / f"{key}.json"
        self.entries: dict[str, dict[str, Any]] = {}
        self.changed = False
        self._hashes: dict[str, str | None] = {}
        self.hits = self.misses = 0

    @classmethod
    def open(cls, directory: Path, settings: Settings) -> Cache:
        """The cache of ``settings`` kept in ``directory``.

        Raises :class:`CacheFolderError` when ``directory`` holds files the cache did not make.
        """
        try:
            refusal = _refusal(directory)
        except OSError:
            refusal = None  # cannot be listed: nothing is read from it and :meth:`save` skips it
        if refusal is not None:
            raise CacheFolderError(
                f"cannot keep the cache in {directory}: {refusal}; choose a new or empty folder (--cache-dir, "
                "cache-dir in [tool.traindoctor], TRAINDOCTOR_CACHE_DIR) or turn the cache off (--no-cache, "
                "TRAINDOCTOR_NO_CACHE=1)"
            )
        cache = cls(directory, fingerprint(settings))
        try:
            data = json.loads(cache.path.read_bytes())
            if isinstance(data, dict) and data.get("format") == _FORMAT and isinstance(data.get("files"), dict):
                cache.entries = data["files"]
        except (OSError, ValueError, RecursionError):
            cache.entries = {}  # missing or corrupt: start again
        return cache

    def _file_hash(self, path: str) -> str | None:
        if path not in self._hashes:
            try:
                with open(path, "rb") as handle:
                    self._hashes[path] = content_hash(handle.read())
            except OSError:
                self._hashes[path] = None
        return self._hashes[path]

    def lookup(self, path: str, digest: str, filename: str) -> list[Finding] | None:
        """The cached findings of ``path`` with content ``digest``, or None (a miss)."""
        entry = self.entries.get(path)
        try:
            if not isinstance(entry, dict) or entry.get("hash") != digest:
                raise LookupError
            deps = entry.get("deps") or {}
            if not all(isinstance(dep, str) for dep in deps):
                raise LookupError
            if any(self._file_hash(dep) != want for dep, want in deps.items()):
                raise LookupError
            findings = _decode(entry["findings"])
            if not isinstance(findings, list) or not all(isinstance(f, Finding) for f in findings):
                raise LookupError
        except (LookupError, TypeError, ValueError, AttributeError, RecursionError):
            self.misses += 1
            return None
        self.hits += 1
        return [f.with_(filename=filename) for f in findings]

    def store(self, path: str, digest: str, findings: list[Finding], dependencies: tuple[str, ...]) -> None:
        deps: dict[str, str] = {}
        for dep in dependencies:
            dep_hash = self._file_hash(dep)
            if dep_hash is None:
                return  # a dependency vanished while checking: do not cache
            deps[dep] = dep_hash
        try:
            encoded = _encode([f.with_(filename="") for f in findings])
        except TypeError:
            return
        self.entries[path] = {"hash": digest, "deps": deps, "findings": encoded}
        self.changed = True

    def save(self) -> None:
        """Write the entries back (atomically); any failure leaves the cache as it was.

        The folder is looked at again first: one that has gained files of the user's since
        :meth:`open` (or cannot be listed) is left alone.
        """
        if not self.changed:
            return
        for path in [p for p in self.entries if not os.path.exists(p)]:
            del self.entries[path]
        try:
            if _refusal(self.directory) is not None:
                return
            entries = self.directory / ENTRIES_DIR
            entries.mkdir(parents=True, exist_ok=True)
            _mark(self.directory)
            payload = json.dumps(
                {"format": _FORMAT, "version": __version__, "files": self.entries}, separators=(",", ":")
            )
            _write_atomically(self.path, payload)
            _prune(entries, keep=self.path)
            _prune(self.directory, keep=self.path, keep_count=0)  # an older traindoctor's entries
        except (OSError, TypeError, ValueError):
            return


# -- the folder: what the cache made -------------------------------------------------------------
def _refusal(directory: Path) -> str | None:
    """Why the cache may not use ``directory``; None when it may (missing, empty or the cache's own).

    Raises ``OSError`` when the folder exists but cannot be listed.
    """
    try:
        names = sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        if os.path.lexists(directory):
            return "it is not a folder"
        return None  # made at the first save (or, below a file, never: saving fails silently)
    if _is_marked(directory / ENTRIES_DIR):
        return None
    foreign = [name for name in names if not _made_by_cache(directory, name)]
    if not foreign:
        return None
    shown = ", ".join(foreign[:3]) + (f", ... ({len(foreign)} in all)" if len(foreign) > 3 else "")
    return f"it holds files the cache did not make ({shown})"


def _is_marked(entries: Path) -> bool:
    try:
        return (entries / MARKER_NAME).read_text(encoding="utf-8") == _MARKER_TEXT
    except (OSError, UnicodeDecodeError):
        return False


def _made_by_cache(directory: Path, name: str) -> bool:
    """Whether ``directory/name`` is something this cache (or an older traindoctor's) writes there."""
    path = directory / name
    if name == ENTRIES_DIR:  # still without its marker: being created by a concurrent run
        try:
            return all(_ENTRY.fullmatch(n) or _TEMPORARY.fullmatch(n) for n in os.listdir(path))
        except OSError:
            return False
    if name in (".gitignore", "CACHEDIR.TAG"):
        try:
            return path.read_text(encoding="utf-8") == (_GITIGNORE_TEXT if name == ".gitignore" else _TAG_TEXT)
        except (OSError, UnicodeDecodeError):
            return False
    return bool(_ENTRY.fullmatch(name) or _TEMPORARY.fullmatch(name)) and path.is_file()


def _mark(directory: Path) -> None:
    """Tell git and backup tools to leave the folder alone (as ruff and pytest do), and mark
    ``entries/`` as the cache's."""
    for path, text in (
        (directory / ".gitignore", _GITIGNORE_TEXT),
        (directory / "CACHEDIR.TAG", _TAG_TEXT),
        (directory / ENTRIES_DIR / MARKER_NAME, _MARKER_TEXT),
    ):
        if not path.exists():
            _write_atomically(path, text)


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in its folder and one rename."""
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a cache is as readable as the project
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def _prune(folder: Path, keep: Path, keep_count: int = KEEP - 1) -> None:
    """Delete all but the newest ``keep_count`` entry files of ``folder`` (besides ``keep``)."""
    files = sorted(
        (folder / name for name in os.listdir(folder) if _ENTRY.fullmatch(name) and folder / name != keep),
        key=lambda p: p.stat().st_mtime if p.exists() else 0,
        reverse=True,
    )
    for stale in files[keep_count:]:
        _unlink(str(stale))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def default_directory(settings: Settings) -> Path:
    """The configured cache folder, else ``.traindoctor_cache`` in the project root (or cwd)."""
    configured = getattr(settings, "cache_dir", None)
    root = settings.project_root or Path.cwd()
    if configured:
        path = Path(configured).expanduser()
        return path if path.is_absolute() else root / path
    return root / CACHE_DIR_NAME


def cache_directory(settings: Settings, cache_dir: str | None = None) -> Path | None:
    """Where ``check`` keeps its cache for ``settings``; None when ``TRAINDOCTOR_NO_CACHE`` turns it off.

    ``cache_dir`` (``--cache-dir``) comes first, then ``TRAINDOCTOR_CACHE_DIR``, then
    :func:`default_directory`. The editor server uses it so that it shares the command's cache.
    """
    if os.environ.get("TRAINDOCTOR_NO_CACHE", "").strip() not in ("", "0", "false"):
        return None
    directory = cache_dir or os.environ.get("TRAINDOCTOR_CACHE_DIR")
    return Path(directory) if directory else default_directory(settings)
