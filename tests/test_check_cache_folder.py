"""The cache owns only what it made: its entries live in a marked subfolder, it deletes only its own
entries, and it refuses a folder that holds anything else (``check`` exits 2; the editor server
checks without the cache and says why)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from traindoctor.check.cache import ENTRIES_DIR, KEEP, MARKER_NAME, Cache, CacheFolderError
from traindoctor.cli import main
from traindoctor.config import Settings
from traindoctor.server.analysis import Analyzer

DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
#: What traindoctor 0.1.0 wrote in its cache folder (besides the entries).
OLD_GITIGNORE = "# Created by traindoctor automatically.\n*\n"
OLD_TAG = "Signature: 8a477f597d28d172789f06886806bc55\n# This file is a cache directory tag created by traindoctor.\n"


@pytest.fixture
def cache_on(monkeypatch):
    monkeypatch.delenv("TRAINDOCTOR_NO_CACHE", raising=False)
    monkeypatch.delenv("TRAINDOCTOR_CACHE_DIR", raising=False)


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "src" / "t.py"
    path.parent.mkdir()
    path.write_text(DEPRECATED)
    return path


def check(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["check", "--min-torch-version", "2.13", "--jobs", "1", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def user_files(folder: Path, count: int) -> dict[str, bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"config_{i:02d}.json").write_text(json.dumps({"lr": i}))
    return snapshot(folder)


@pytest.mark.parametrize("count", [11, 20])
def test_a_folder_of_the_users_is_refused_and_left_as_it_was(tmp_path, script, capsys, cache_on, count):
    folder = tmp_path / "configs"
    before = user_files(folder, count)
    code, out, err = check(capsys, "--cache-dir", str(folder), str(script))
    assert code == 2 and out == ""
    assert f"cannot keep the cache in {folder}: it holds files the cache did not make (config_00.json" in err
    assert f"({count} in all)" in err and "--no-cache" in err and "Traceback" not in err
    assert snapshot(folder) == before  # nothing deleted, no .gitignore, no entries


def test_the_current_folder_is_refused(tmp_path, script, capsys, cache_on, monkeypatch):
    monkeypatch.chdir(script.parent)
    before = snapshot(script.parent)
    code, _, err = check(capsys, "--cache-dir", ".", "t.py")
    assert code == 2 and "it holds files the cache did not make (t.py)" in err
    assert snapshot(script.parent) == before


def test_a_file_is_refused_as_a_cache_folder(tmp_path, script, capsys, cache_on):
    blocker = tmp_path / "cache.json"
    blocker.write_text("{}")
    code, _, err = check(capsys, "--cache-dir", str(blocker), str(script))
    assert code == 2 and "it is not a folder" in err and blocker.read_text() == "{}"


def test_the_environment_and_the_configuration_are_held_to_the_same_rule(tmp_path, script, capsys, cache_on):
    folder = tmp_path / "configs"
    before = user_files(folder, 3)
    os.environ["TRAINDOCTOR_CACHE_DIR"] = str(folder)
    assert check(capsys, str(script))[0] == 2
    del os.environ["TRAINDOCTOR_CACHE_DIR"]
    (tmp_path / "pyproject.toml").write_text('[tool.traindoctor]\ncache-dir = "configs"\n')
    assert check(capsys, str(script))[0] == 2
    assert snapshot(folder) == before
    assert check(capsys, "--no-cache", str(script))[0] == 1  # off: the folder is not looked at


def test_a_new_or_empty_folder_gets_the_layout(tmp_path, script, capsys, cache_on):
    for folder in (tmp_path / "new" / "cache", tmp_path / "empty"):
        if folder.name == "empty":
            folder.mkdir()
        assert check(capsys, "--cache-dir", str(folder), str(script))[0] == 1
        names = set(snapshot(folder))
        layout = {".gitignore", "CACHEDIR.TAG", f"{ENTRIES_DIR}/{MARKER_NAME}"}
        assert layout < names and len(names) == 4
        assert re.fullmatch(rf"{ENTRIES_DIR}/[0-9a-f]{{32}}\.json", (names - layout).pop())
        assert check(capsys, "--cache-dir", str(folder), str(script))[0] == 1  # the cache's own: used


def test_only_the_caches_own_entries_are_deleted(tmp_path, script, capsys, cache_on):
    folder = tmp_path / "cache"
    check(capsys, "--cache-dir", str(folder), str(script))
    entries = folder / ENTRIES_DIR
    # Files dropped into the (marked) folder later stay; the folder is still the cache's.
    kept = [folder / "notes.json", entries / "mine.json", entries / ("0" * 31 + "g.json")]
    for path in kept:
        path.write_text("{}")

    def fingerprints() -> set[Path]:
        return {p for p in entries.iterdir() if re.fullmatch(r"[0-9a-f]{32}\.json", p.name)}

    made: list[Path] = sorted(fingerprints())
    os.utime(made[0], (999, 999))
    for i in range(KEEP + 3):  # more settings combinations than it keeps: the oldest go
        before = fingerprints()
        assert check(capsys, "--cache-dir", str(folder), "--min-torch-version", f"2.{i}", str(script))[0] in (0, 1)
        (new,) = fingerprints() - before
        os.utime(new, (1000 + i, 1000 + i))  # a clear order, whatever the clock's resolution
        made.append(new)
    assert fingerprints() == set(made[-KEEP:])
    assert all(path.read_text() == "{}" for path in kept) and (entries / MARKER_NAME).is_file()


def test_an_older_caches_folder_is_taken_over(tmp_path, script, capsys, cache_on):
    folder = tmp_path / ".traindoctor_cache"
    folder.mkdir()
    (folder / ".gitignore").write_text(OLD_GITIGNORE)
    (folder / "CACHEDIR.TAG").write_text(OLD_TAG)
    old_entry = folder / ("a" * 32 + ".json")
    old_entry.write_text('{"format": 1, "files": {}}')
    assert check(capsys, "--cache-dir", str(folder), str(script))[0] == 1
    assert not old_entry.exists() and (folder / ENTRIES_DIR / MARKER_NAME).is_file()
    # A folder whose .gitignore is the user's is not an older cache's.
    other = tmp_path / "other"
    other.mkdir()
    (other / ".gitignore").write_text("*.pyc\n")
    (other / ("b" * 32 + ".json")).write_text("{}")
    assert check(capsys, "--cache-dir", str(other), str(script))[0] == 2
    assert sorted(p.name for p in other.iterdir()) == [".gitignore", "b" * 32 + ".json"]


def test_cache_open_raises_a_usage_error(tmp_path):
    before = user_files(tmp_path / "configs", 2)
    with pytest.raises(CacheFolderError, match="it holds files the cache did not make"):
        Cache.open(tmp_path / "configs", Settings())
    assert snapshot(tmp_path / "configs") == before


def test_the_editor_server_checks_without_a_refused_cache(tmp_path, script, cache_on, monkeypatch):
    folder = tmp_path / "configs"
    before = user_files(folder, 3)
    monkeypatch.setenv("TRAINDOCTOR_CACHE_DIR", str(folder))
    analyzer = Analyzer(root=tmp_path)
    outcome = analyzer.check_text(script, script.read_text(), use_cache=True)
    assert [f.code for f in outcome.findings] == ["TD304"] and not outcome.cached
    assert len(outcome.warnings) == 1 and "the cache is not used" in outcome.warnings[0]
    assert f"cannot keep the cache in {folder}" in outcome.warnings[0]
    assert snapshot(folder) == before
    # A folder it may use: stored, then served from it, with no warning.
    monkeypatch.setenv("TRAINDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    assert analyzer.check_text(script, script.read_text(), use_cache=True).warnings == []
    again = analyzer.check_text(script, script.read_text(), use_cache=True)
    assert again.cached and again.warnings == [] and (tmp_path / "cache" / ENTRIES_DIR / MARKER_NAME).is_file()
