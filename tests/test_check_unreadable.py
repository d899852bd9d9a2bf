"""``check`` reports what it cannot read (a file, a folder, a symlink loop) for that path and checks
the rest, instead of stopping with an internal error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from traindoctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
LOOP = "Cannot read the file (Too many levels of symbolic links); it was skipped."
DENIED_FILE = "Cannot read the file (Permission denied); it was skipped."
DENIED_FOLDER = "Cannot read the folder (Permission denied); it was skipped."


def findings(capsys, *argv: str) -> tuple[int, list[tuple[str, str, str]], str]:
    code = main(["check", "--no-cache", "--min-torch-version", "2.13", "--output-format", "json", *argv])
    out, err = capsys.readouterr()
    return code, sorted((d["filename"], d["code"], d["message"]) for d in json.loads(out)), err


@pytest.fixture
def loop(tmp_path: Path, monkeypatch) -> Path:
    """``a.py -> b.py -> a.py`` next to a file with a finding; the working folder is ``tmp_path``."""
    folder = tmp_path / "loop"
    folder.mkdir()
    (folder / "a.py").symlink_to("b.py")
    (folder / "b.py").symlink_to("a.py")
    (folder / "ok.py").write_text(DEPRECATED)
    monkeypatch.chdir(tmp_path)
    return folder


def test_a_symlink_loop_in_a_folder_is_a_finding_and_the_rest_is_checked(loop, capsys):
    code, found, err = findings(capsys, "loop")
    assert code == 1 and "internal error" not in err
    assert [(f, c) for f, c, _ in found] == [("loop/a.py", "TD000"), ("loop/b.py", "TD000"), ("loop/ok.py", "TD304")]
    assert found[0][2] == found[1][2] == LOOP


def test_a_symlink_loop_named_on_the_command_line_is_a_finding(loop, capsys):
    code, found, err = findings(capsys, "loop/a.py", "loop/ok.py")
    assert code == 1 and "no such file" not in err and "internal error" not in err
    assert found[0] == ("loop/a.py", "TD000", LOOP) and [c for _, c, _ in found] == ["TD000", "TD304"]
    # --force-exclude resolves named paths: a loop does not stop it either.
    assert findings(capsys, "--force-exclude", "loop/a.py")[1] == [("loop/a.py", "TD000", LOOP)]


def test_without_td000_an_unreadable_path_is_a_warning(loop, capsys):
    code, found, err = findings(capsys, "--select", "TD304", "loop")
    assert code == 1 and [c for _, c, _ in found] == ["TD304"]
    assert f"traindoctor: warning: loop/a.py: {LOOP}" in err and "internal error" not in err


@pytest.fixture
def locked_tree(tmp_path: Path) -> Iterator[Path]:
    """A project with a folder that cannot be listed, one that can be listed but not entered (with
    a ``.gitignore`` in it), a file that cannot be read, and a file with a finding."""
    project = tmp_path / "proj"
    for rel, text in [
        ("ok.py", DEPRECATED),
        ("secret.py", DEPRECATED),
        ("locked/t.py", DEPRECATED),
        ("no_entry/t.py", DEPRECATED),
        ("no_entry/.gitignore", "*.log\n"),
    ]:
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    (project / "secret.py").chmod(0o000)
    (project / "locked").chmod(0o000)
    (project / "no_entry").chmod(0o644)
    try:
        if run_unprivileged(tmp_path, "-c", "open('proj/secret.py')").returncode == 0:
            pytest.skip("file permissions do not apply to this process (root that cannot drop its powers)")
        yield project
    finally:
        for folder in ("locked", "no_entry"):
            (project / folder).chmod(0o755)


def _drop_root_powers() -> None:
    """In the child, before exec: take CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (root's way past
    file permissions) out of the bounding set, so that the program it runs obeys permissions."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def run_unprivileged(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python ARGV`` in a process that file permissions apply to (under root: without the
    capabilities that bypass them)."""
    as_root = sys.platform.startswith("linux") and os.geteuid() == 0
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "src")),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_drop_root_powers if as_root else None,
    )


def check_unprivileged(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return run_unprivileged(cwd, "-m", "traindoctor", "check", "--no-cache", "--min-torch-version", "2.13", *argv)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_unreadable_folders_and_files_are_findings_and_the_rest_is_checked(locked_tree):
    done = check_unprivileged(locked_tree.parent, "--output-format", "json", "proj")
    assert done.returncode == 1 and "internal error" not in done.stderr, done.stderr
    found = sorted((d["filename"], d["code"], d["message"]) for d in json.loads(done.stdout))
    assert found[:3] == [
        ("proj/locked", "TD000", DENIED_FOLDER),
        ("proj/no_entry/t.py", "TD000", DENIED_FILE),
        ("proj/ok.py", "TD304", found[2][2]),
    ]
    assert found[3:] == [("proj/secret.py", "TD000", DENIED_FILE)]
    # The text summary counts the files, not the folder.
    text = check_unprivileged(locked_tree.parent, "proj")
    assert "Found 4 findings (3 errors, 1 info) in 3 files." in text.stdout, text.stdout + text.stderr
    # A file named on the command line behind a folder that cannot be entered.
    named = check_unprivileged(locked_tree.parent, "--output-format", "json", "proj/ok.py", "proj/locked/t.py")
    assert named.returncode == 1 and "internal error" not in named.stderr, named.stderr
    assert [(d["filename"], d["message"]) for d in json.loads(named.stdout) if d["code"] == "TD000"] == [
        ("proj/locked/t.py", DENIED_FILE)
    ]
