"""Settings: ``[tool.traindoctor]`` in pyproject.toml, overridden by command-line flags.

Recognised keys (kebab- or snake-case): ``select``, ``ignore``, ``extend-select``,
``per-file-ignores`` (glob -> codes), ``exclude``, ``extend-exclude``, ``force-exclude``,
``min-torch-version``, ``respect-gitignore``, ``cache-dir`` and ``thresholds`` (runtime rule
options, see each rule's doc).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    ".env",
    "env",
    "__pycache__",
    "build",
    "dist",
    "node_modules",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    "site-packages",
    ".eggs",
    "*.egg-info",
)


class ConfigError(ValueError):
    """A configuration file or flag that cannot be used (reported as a usage error)."""


def parse_version(text: str) -> tuple[int, ...]:
    """``"2.5.1+cu121"`` -> ``(2, 5, 1)``."""
    parts = []
    for piece in text.split("+", 1)[0].split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    if not parts:
        raise ConfigError(f"not a version: {text!r}")
    return tuple(parts)


def installed_torch_version() -> str | None:
    """The installed torch's version from package metadata; never imports torch."""
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:  # pragma: no cover
        return None
    try:
        return version("torch")
    except PackageNotFoundError:
        return None


@dataclass
class Settings:
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=lambda: list(DEFAULT_EXCLUDE))
    extend_exclude: list[str] = field(default_factory=list)
    respect_gitignore: bool = True
    #: Apply ``exclude`` to files named explicitly too (what a pre-commit hook needs).
    force_exclude: bool = False
    #: Where ``traindoctor check`` keeps its cache (relative: to the project root).
    cache_dir: str | None = None
    #: The oldest torch the checked code must support; None: derive (see min_torch).
    min_torch_version: str | None = None
    #: Runtime rule thresholds, keyed by rule code or option name.
    thresholds: dict[str, Any] = field(default_factory=dict)
    project_root: Path | None = None

    @cached_property
    def min_torch(self) -> tuple[int, ...] | None:
        """Minimum torch version as a tuple; None means "assume current"."""
        text = self.min_torch_version or installed_torch_version()
        return parse_version(text) if text else None

    def torch_below(self, version: str) -> bool:
        """Whether the code must run on a torch older than ``version``."""
        mt = self.min_torch
        return mt is not None and mt < parse_version(version)

    def enabled_codes(self) -> frozenset[str]:
        """The codes on after --select/--ignore expansion (computed once per Settings)."""
        key = (tuple(self.select or ()), self.select is None, tuple(self.ignore), tuple(self.extend_select))
        cached = self.__dict__.get("_enabled")
        if cached is None or cached[0] != key:
            from traindoctor.registry import select_codes

            cached = (key, frozenset(select_codes(self.select, self.ignore, self.extend_select)))
            self.__dict__["_enabled"] = cached
        return cached[1]

    def ignored_for(self, path: str) -> list[str]:
        out: list[str] = []
        rel = path
        if self.project_root is not None:
            try:
                rel = str(Path(path).resolve().relative_to(self.project_root.resolve()))
            except ValueError:
                rel = path
        for pattern, codes in sorted(self.per_file_ignores.items()):
            if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(Path(rel).name, pattern):
                out.extend(codes)
        return out

    def with_overrides(self, **changes: Any) -> Settings:
        clean = {k: v for k, v in changes.items() if v is not None}
        new = dataclasses.replace(self, **clean)
        new.__dict__.pop("min_torch", None)
        new.__dict__.pop("_enabled", None)
        return new


def _key(k: str) -> str:
    return k.replace("-", "_")


def settings_from_mapping(data: Mapping[str, Any], root: Path | None = None) -> Settings:
    known = {f.name for f in dataclasses.fields(Settings)}
    kwargs: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = _key(raw_key)
        if key not in known or key == "project_root":
            raise ConfigError(f"unknown [tool.traindoctor] option: {raw_key!r}")
        if key in ("select", "ignore", "extend_select", "exclude", "extend_exclude"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"[tool.traindoctor] {raw_key} must be a list of strings")
        if key == "per_file_ignores":
            if not isinstance(value, dict):
                raise ConfigError("[tool.traindoctor] per-file-ignores must be a table")
            value = {str(k): list(v) for k, v in value.items()}
        if key in ("respect_gitignore", "force_exclude") and not isinstance(value, bool):
            raise ConfigError(f"[tool.traindoctor] {raw_key} must be true or false")
        if key == "cache_dir" and not isinstance(value, str):
            raise ConfigError(f"[tool.traindoctor] {raw_key} must be a path")
        if key == "min_torch_version":
            value = str(value)
            parse_version(value)
        kwargs[key] = value
    return Settings(project_root=root, **kwargs)


def find_pyproject(start: Path) -> Path | None:
    start = start.resolve()
    for folder in [start, *start.parents] if start.is_dir() else [start.parent, *start.parent.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_settings(paths: list[str] | None = None, config: str | None = None) -> Settings:
    """Settings from ``config`` or the nearest pyproject.toml above the first path (or cwd)."""
    cfg: Path | None
    if config:
        cfg = Path(config)
        if not cfg.is_file():
            raise ConfigError(f"config file not found: {config}")
    else:
        first = Path(paths[0]) if paths else Path.cwd()
        cfg = find_pyproject(first if first.exists() else Path.cwd())
    if cfg is None:
        return Settings(project_root=Path.cwd())
    # Imported here: most runs (and every ``traindoctor run`` without a pyproject.toml) never parse
    # TOML, and ``tomllib`` compiles its regular expressions when imported.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib  # type: ignore[import-not-found]  # installed on Python 3.10 only
    try:
        data = tomllib.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read {cfg}: {exc}") from exc
    section = data.get("tool", {}).get("traindoctor", {})
    if not isinstance(section, dict):
        raise ConfigError(f"{cfg}: [tool.traindoctor] must be a table")
    return settings_from_mapping(section, cfg.parent)
