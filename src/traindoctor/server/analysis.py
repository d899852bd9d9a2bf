"""What the editor server checks, and how: one open document as ``traindoctor check`` would.

A document is checked with the settings ``check`` would use for its file (the nearest
``pyproject.toml`` above it, re-read when it changes), with the project around it (imported
project modules are read from disk), and not at all when the configuration's ``exclude`` covers
it (as ``check --force-exclude`` treats a file it is given). A document whose text is the file on
disk is looked up in, and stored to, the cache ``check`` keeps (same folder, same entries, same
rules: a folder holding files the cache did not make is refused, and the document is then checked
without the cache, with a warning); an edited buffer is checked afresh and never stored, so the
command never sees unsaved text.

A notebook arrives as cells: they are put back together as the notebook file they stand for and
checked by the notebook support of ``check``, so the findings carry the cell numbers ``check``
prints (every cell counts, markdown too).

Nothing here needs the LSP library; :mod:`traindoctor.server.app` turns the findings into
diagnostics.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from traindoctor.check.cache import Cache, CacheFolderError, cache_directory, content_hash
from traindoctor.check.checkfile import check_file
from traindoctor.check.discovery import force_excluded
from traindoctor.check.engine import check_source, instantiate
from traindoctor.config import Settings, find_pyproject, load_settings
from traindoctor.finding import Finding, sort_findings
from traindoctor.rules.base import Rule
from traindoctor.static.source import decode_source


@dataclass
class Outcome:
    """The findings for one document (or notebook) and what got in the way."""

    findings: list[Finding] = field(default_factory=list)
    #: The configuration excludes the file: it has no findings.
    excluded: bool = False
    #: Rules that crashed (their findings are missing; the others' are there).
    internal_errors: list[str] = field(default_factory=list)
    #: Served from the cache ``check`` shares.
    cached: bool = False
    #: Why the cache was not used although it is on (its folder was refused).
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Cell:
    """One notebook cell as the editor holds it."""

    code: bool
    text: str


def notebook_bytes(cells: list[Cell]) -> bytes:
    """The ``.ipynb`` file (nbformat 4) that holds ``cells``: what ``check`` reads for a notebook."""
    doc = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c.text}
            if c.code
            else {"cell_type": "markdown", "metadata": {}, "source": c.text}
            for c in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(doc, ensure_ascii=False).encode("utf-8")


class Analyzer:
    """Checks documents; keeps each project's settings and rules between checks."""

    def __init__(self, root: Path | None = None) -> None:
        #: The project root of files no pyproject.toml is above (``check`` takes its working
        #: folder; the server, the editor's workspace).
        self.root = root
        #: pyproject.toml (or None) -> (its mtime, the settings read from it).
        self._settings: dict[Path | None, tuple[int, Settings]] = {}
        self._rules: dict[frozenset[str], list[Rule]] = {}

    def settings_for(self, path: Path) -> Settings:
        """The settings ``check`` would use for ``path``; raises ConfigError like ``check``."""
        config = find_pyproject(path if path.exists() else path.parent)
        try:
            stamp = config.stat().st_mtime_ns if config is not None else 0
        except OSError:
            stamp = -1
        known = self._settings.get(config)
        if known is not None and known[0] == stamp:
            return known[1]
        if config is None:
            settings = Settings(project_root=self.root or path.parent)
        else:
            settings = load_settings(config=str(config))
        self._settings[config] = (stamp, settings)
        return settings

    def _rules_for(self, settings: Settings) -> list[Rule]:
        codes = settings.enabled_codes()
        if codes not in self._rules:
            self._rules[codes] = instantiate(codes)
        return self._rules[codes]

    def excluded(self, path: Path, settings: Settings) -> bool:
        excludes = list(settings.exclude) + list(settings.extend_exclude)
        return force_excluded(path, excludes, settings.project_root)

    def check_text(self, path: Path, text: str, use_cache: bool = False) -> Outcome:
        """Findings for a Python document with ``text``; ``use_cache``: the text may be the saved file."""
        settings = self.settings_for(path)
        if self.excluded(path, settings):
            return Outcome(excluded=True)
        rules = self._rules_for(settings)
        filename = str(path)
        saved = _saved_bytes(path, text) if use_cache else None
        directory = cache_directory(settings) if saved is not None else None
        warnings: list[str] = []
        try:
            cache = Cache.open(directory, settings) if directory is not None else None
        except CacheFolderError as exc:
            cache, warnings = None, [f"traindoctor: the cache is not used: {exc}"]
        key, digest = os.path.abspath(filename), content_hash(saved or b"")
        if cache is not None:
            found = cache.lookup(key, digest, filename)
            if found is not None:
                return Outcome(sort_findings(found), cached=True)
        result = check_source(text, filename, settings, rules)
        if cache is not None and not result.internal_errors:
            cache.store(key, digest, result.findings, result.dependencies)
            cache.save()
        return Outcome(sort_findings(result.findings), internal_errors=result.internal_errors, warnings=warnings)

    def check_notebook(self, path: Path, cells: list[Cell]) -> Outcome:
        """Findings for a notebook made of ``cells``, located by cell number and row in the cell."""
        settings = self.settings_for(path)
        if self.excluded(path, settings):
            return Outcome(excluded=True)
        outcome = check_file(str(path), notebook_bytes(cells), settings, self._rules_for(settings))
        return Outcome(sort_findings(outcome.findings), internal_errors=outcome.internal_errors)


def _saved_bytes(path: Path, text: str) -> bytes | None:
    """The file's bytes when they hold exactly ``text`` (an unedited buffer), else None."""
    try:
        data = path.read_bytes()
        return data if decode_source(data) == text else None
    except (OSError, UnicodeDecodeError, LookupError, SyntaxError):
        return None
