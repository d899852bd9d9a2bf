"""`traindoctor check` behaves like `ruff check` where a new user would notice."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from traindoctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
SRC = str(ROOT / "src")
DEPRECATED = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
FIXED = 'import torch\nscaler = torch.amp.GradScaler("cuda")\n'


def write(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def codes(capsys, *argv: str) -> list[str]:
    code, out, err = run(capsys, "--output-format", "json", *argv)
    assert code in (0, 1), err
    return sorted(d["code"] for d in json.loads(out))


@pytest.fixture
def two_codes(tmp_path):
    """One TD000 (a file that does not parse) and one TD304 (deprecated AMP API)."""
    write(tmp_path, "broken.py", "def f(:\n")
    write(tmp_path, "amp.py", DEPRECATED)
    write(tmp_path, "pyproject.toml", '[tool.traindoctor]\nmin-torch-version = "2.13"\n')
    return tmp_path


# -- rule selection -------------------------------------------------------------------------------
def test_cli_select_overrides_configured_ignore_like_ruff(two_codes, capsys):
    write(two_codes, "pyproject.toml", '[tool.traindoctor]\nmin-torch-version = "2.13"\nignore = ["TD304"]\n')
    assert codes(capsys, str(two_codes)) == ["TD000"]
    assert codes(capsys, "--select", "TD304", str(two_codes)) == ["TD304"]
    # Without --select, the configured ignore stays and the command line adds to it.
    assert codes(capsys, "--ignore", "TD000", str(two_codes)) == []
    # --extend-select on the command line is a later layer: it re-enables a configured ignore.
    assert codes(capsys, "--extend-select", "TD304", str(two_codes)) == ["TD000", "TD304"]
    # ...unless the command line also ignores it more specifically.
    assert codes(capsys, "--extend-select", "TD3", "--ignore", "TD304", str(two_codes)) == ["TD000"]


def test_selection_flags_repeat_and_accumulate(two_codes, capsys):
    assert codes(capsys, "--select", "TD000", "--select", "TD304", str(two_codes)) == ["TD000", "TD304"]
    assert codes(capsys, "--select", "TD000,TD304", "--ignore", "TD000", "--ignore", "TD304", str(two_codes)) == []
    assert codes(capsys, "--select", "TD000", "--extend-select", "TD1", "--extend-select", "TD304", str(two_codes)) == [
        "TD000",
        "TD304",
    ]


# -- discovery ------------------------------------------------------------------------------------
def test_force_exclude_applies_exclude_to_named_files(tmp_path, capsys):
    write(tmp_path, "pyproject.toml", '[tool.traindoctor]\nextend-exclude = ["generated"]\n')
    bad = write(tmp_path, "generated/bad.py", "def f(:\n")
    other = write(tmp_path, "src/other.py", "def g(:\n")
    assert run(capsys, str(bad))[0] == 1  # named explicitly: checked, as ruff does
    code, out, _ = run(capsys, "--force-exclude", "--output-format", "json", str(bad), str(other))
    assert code == 1 and [Path(d["filename"]).name for d in json.loads(out)] == ["other.py"]
    assert run(capsys, "--force-exclude", str(bad))[0] == 0
    # Also from the configuration, and for an excluded folder named on the command line.
    write(tmp_path, "pyproject.toml", '[tool.traindoctor]\nexclude = ["generated"]\nforce-exclude = true\n')
    assert run(capsys, str(bad))[0] == 0
    assert run(capsys, str(tmp_path / "generated"))[0] == 0
    assert run(capsys, "--no-force-exclude", str(bad))[0] == 1


def test_pre_commit_hook_uses_force_exclude_and_sees_notebooks():
    hook = (ROOT / ".pre-commit-hooks.yaml").read_text()
    assert "entry: traindoctor check --force-exclude" in hook
    assert "jupyter" in hook


def test_missing_path_exits_2_without_all_checks_passed(tmp_path, capsys):
    write(tmp_path, "ok.py", "x = 1\n")
    code, out, err = run(capsys, str(tmp_path / "nope.py"), str(tmp_path / "ok.py"))
    assert code == 2
    assert "nope.py: no such file or directory" in err
    assert "All checks passed" not in out


def test_output_into_missing_folder_is_a_clear_error(tmp_path, capsys):
    write(tmp_path, "amp.py", DEPRECATED)
    target = tmp_path / "missing" / "report.json"
    code, out, err = run(capsys, "--fix", "-o", str(target), str(tmp_path))
    assert code == 2
    assert "cannot write the report" in err and "does not exist" in err
    assert "internal error" not in err
    assert (tmp_path / "amp.py").read_text() == DEPRECATED  # nothing was done


def test_statistics_honour_json(two_codes, capsys):
    code, out, _ = run(capsys, "--statistics", "--output-format", "json", str(two_codes))
    assert code == 1
    assert json.loads(out) == [
        {"code": "TD000", "name": "parse-error", "count": 1, "fixable": False},
        {"code": "TD304", "name": "deprecated-amp-api", "count": 1, "fixable": True},
    ]


# -- stdin ----------------------------------------------------------------------------------------
def _stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))


def test_stdin_with_stdin_filename(tmp_path, capsys, monkeypatch):
    _stdin(monkeypatch, DEPRECATED)
    code, out, _ = run(capsys, "--min-torch-version", "2.13", "--stdin-filename", "pkg/train.py", "-")
    assert code == 1 and "pkg/train.py:2:10: TD304" in out
    _stdin(monkeypatch, DEPRECATED)
    code, out, _ = run(capsys, "--min-torch-version", "2.13", "-")
    assert code == 1 and "-:2:10: TD304" in out
    code, _, err = run(capsys, "-", str(tmp_path))
    assert code == 2 and "cannot be combined" in err


def test_stdin_config_per_file_ignores_and_force_exclude_use_the_stdin_filename(tmp_path, capsys, monkeypatch):
    write(
        tmp_path,
        "pyproject.toml",
        '[tool.traindoctor]\nmin-torch-version = "2.13"\n'
        'per-file-ignores = {"legacy/*" = ["TD304"]}\nextend-exclude = ["gen"]\n',
    )
    _stdin(monkeypatch, DEPRECATED)
    assert run(capsys, "--stdin-filename", str(tmp_path / "legacy" / "t.py"), "-")[0] == 0
    _stdin(monkeypatch, DEPRECATED)
    assert run(capsys, "--stdin-filename", str(tmp_path / "t.py"), "-")[0] == 1
    _stdin(monkeypatch, DEPRECATED)
    code, out, _ = run(capsys, "--force-exclude", "--stdin-filename", str(tmp_path / "gen" / "t.py"), "-")
    assert code == 0 and out == ""


def test_stdin_fix_prints_the_fixed_source(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "traindoctor",
            "check",
            "--min-torch-version",
            "2.13",
            "--fix",
            "--stdin-filename",
            "t.py",
            "-",
        ],
        input=DEPRECATED.encode(),
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": SRC},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode() == FIXED
    assert b"Fixed 1 finding." in proc.stderr


# -- noqa and grammar -----------------------------------------------------------------------------
def test_file_level_noqa(tmp_path, capsys):
    path = write(tmp_path, "t.py", "# traindoctor: noqa\n" + DEPRECATED)
    assert run(capsys, "--min-torch-version", "2.13", str(path))[0] == 0
    path.write_text("#  traindoctor: noqa: TD1, TD304\n" + DEPRECATED)
    assert run(capsys, "--min-torch-version", "2.13", str(path))[0] == 0
    path.write_text("# traindoctor: noqa: TD1\n" + DEPRECATED)
    assert "TD304" in run(capsys, "--min-torch-version", "2.13", str(path))[1]
    # Only a comment line of its own counts, as ruff's file-level noqa comment.
    path.write_text(DEPRECATED.rstrip("\n") + "  # traindoctor: noqa\n")
    assert "TD304" in run(capsys, "--min-torch-version", "2.13", str(path))[1]


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="needs an interpreter older than 3.12")
@pytest.mark.parametrize(
    "source, feature",
    [
        ("type Batch = list[int]\n", "`type` aliases"),
        ("def first[T](xs: list[T]) -> T:\n    return xs[0]\n", "type parameter lists"),
        ("class Box[T]:\n    pass\n", "type parameter lists"),
        ('x = {"a": 1}\nprint(f"{x["a"]}")\n', "f-strings"),
    ],
)
def test_newer_python_grammar_gets_a_message_that_says_so(tmp_path, capsys, source, feature):
    path = write(tmp_path, "new.py", source)
    code, out, err = run(capsys, str(path))
    assert code == 1 and "TD000" in out and "Traceback" not in err
    assert "Python 3.12 syntax" in out and feature in out and "run it with Python 3.12 or newer" in out


def test_plain_syntax_errors_do_not_blame_the_python_version(tmp_path, capsys):
    path = write(tmp_path, "bad.py", "def f(:\n    pass\nx = [1, 2\n")
    out = run(capsys, str(path))[1]
    assert "TD000" in out and "looks like Python" not in out


# -- writing fixes --------------------------------------------------------------------------------
def test_fix_writes_atomically_and_keeps_permissions(tmp_path, capsys):
    path = write(tmp_path, "t.py", DEPRECATED)
    path.chmod(0o640)
    link = tmp_path / "link.py"
    link.symlink_to(path)
    code, out, _ = run(capsys, "--min-torch-version", "2.13", "--fix", str(link))
    assert code == 0 and "Fixed 1 finding." in out
    assert path.read_text() == FIXED
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert link.is_symlink()  # the link's target was fixed, the link stays a link
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.py", "t.py"]  # no temporary left


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="giving a file to another user needs root")
def test_fix_keeps_the_files_owner_and_group(tmp_path, capsys):
    path = write(tmp_path, "t.py", DEPRECATED)
    os.chown(path, 12345, 23456)
    path.chmod(0o664)
    code, out, err = run(capsys, "--min-torch-version", "2.13", "--fix", str(path))
    assert code == 0 and "Fixed 1 finding." in out, err
    status = path.stat()
    assert path.read_text() == FIXED
    assert (status.st_uid, status.st_gid, stat.S_IMODE(status.st_mode)) == (12345, 23456, 0o664)
    # --add-noqa writes the same way.
    other = write(tmp_path, "u.py", DEPRECATED)
    os.chown(other, 12345, 23456)
    assert run(capsys, "--min-torch-version", "2.13", "--add-noqa", str(other))[0] == 0
    assert other.read_text().endswith("GradScaler()  # noqa: TD304\n")
    assert (other.stat().st_uid, other.stat().st_gid) == (12345, 23456)


def test_a_file_whose_owner_cannot_be_kept_is_left_intact(tmp_path, capsys, monkeypatch):
    import traindoctor.check.writer as writer

    path = write(tmp_path, "t.py", DEPRECATED)
    real_stat = writer.os.fstat

    def other_owner(fd):  # the new file would belong to someone else than the original...
        status = real_stat(fd)
        return os.stat_result((*status[:4], status.st_uid + 1, *status[5:]))

    def not_allowed(fd, uid, gid):  # ...and may not be given to the original's owner
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(writer.os, "fstat", other_owner)
    monkeypatch.setattr(writer.os, "fchown", not_allowed, raising=False)
    code, out, err = run(capsys, "--min-torch-version", "2.13", "--fix", "--jobs", "1", str(path))
    assert code == 2 and "cannot keep the file's owner and group" in err and "left unchanged" in err
    assert path.read_text() == DEPRECATED and [p.name for p in tmp_path.iterdir()] == ["t.py"]


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_an_inserted_line_ends_as_the_files_lines_do(tmp_path, capsys, ending):
    lines = [
        "import torch",
        "scaler = torch.amp.GradScaler()",
        "def step(model, optimizer, loss):",
        "    scaler.scale(loss).backward()",
        "    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
        "    scaler.step(optimizer)",
        "    scaler.update()",
    ]
    path = tmp_path / "t.py"
    path.write_bytes(ending.join([*lines, ""]).encode())
    code, out, err = run(capsys, "--select", "TD302", "--fix", str(path))
    assert code == 0 and "Fixed 1 finding." in out, out + err
    fixed = [*lines[:4], "    scaler.unscale_(optimizer)", *lines[4:], ""]
    assert path.read_bytes() == ending.join(fixed).encode()


def test_read_only_file_is_left_intact_and_reported(tmp_path, capsys):
    path = write(tmp_path, "t.py", DEPRECATED)
    path.chmod(0o444)
    try:
        code, out, err = run(capsys, "--min-torch-version", "2.13", "--fix", str(path))
    finally:
        path.chmod(0o644)
    assert code == 2
    assert "cannot write the fixes to" in err and "read-only" in err and "left unchanged" in err
    assert path.read_text() == DEPRECATED
    assert f"{path}:2:10: TD304" in out  # still reported: it was not fixed
    assert "Fixed" not in out


def test_failed_write_leaves_the_original_and_no_temporary(tmp_path, capsys, monkeypatch):
    import traindoctor.check.writer as writer

    path = write(tmp_path, "t.py", DEPRECATED)

    def full_disk(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writer.os, "replace", full_disk)
    code, out, err = run(capsys, "--min-torch-version", "2.13", "--fix", "--jobs", "1", str(path))
    assert code == 2 and "No space left on device" in err
    assert path.read_text() == DEPRECATED
    assert [p.name for p in tmp_path.iterdir()] == ["t.py"]


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="needs an interpreter older than 3.14")
def test_python_314_except_without_parentheses_but_not_python_2(tmp_path, capsys):
    path = write(tmp_path, "new.py", "try:\n    pass\nexcept ValueError, TypeError:\n    pass\n")
    assert "Python 3.14 syntax" in run(capsys, str(path))[1]
    path.write_text("try:\n    pass\nexcept ValueError, e:\n    pass\n")
    out = run(capsys, str(path))[1]
    assert "TD000" in out and "looks like Python" not in out
