"""`traindoctor check / rule / rules` end to end: discovery, config, formats, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from traindoctor.cli import main
from traindoctor.finding import Edit, Finding, Fix, Location, Origin, Severity
from traindoctor.registry import all_rules
from traindoctor.report import github, sarif

DATA = Path(__file__).parent / "data"


def write(root: Path, rel: str, text: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def project(tmp_path):
    write(tmp_path, "ok.py", "x = 1\n")
    write(tmp_path, "pkg/broken.py", "def f(:\n    pass\n")
    write(tmp_path, "pkg/binary.py", b"\x00\x01\x02")
    return tmp_path


def test_exit_codes_and_text_output(project, capsys):
    code, out, err = run(capsys, "check", str(project))
    assert code == 1
    assert f"{project / 'pkg' / 'broken.py'}:1:7: TD000 SyntaxError" in out
    assert " 1 | def f(:" in out and "^" in out
    assert "Found 2 findings (2 errors) in 3 files." in out
    assert "Traceback" not in out + err


def test_clean_tree_exits_zero(tmp_path, capsys):
    write(tmp_path, "a.py", "import torch\nprint(torch.__version__)\n")
    code, out, _ = run(capsys, "check", str(tmp_path))
    assert code == 0 and "All checks passed!" in out


def test_missing_path_is_a_usage_error_but_others_are_checked(project, capsys):
    code, out, err = run(capsys, "check", str(project / "nope.py"), str(project / "pkg"))
    assert code == 2
    assert "nope.py: no such file" in err
    assert "TD000" in out


def test_unknown_selector_is_usage_error(project, capsys):
    code, _, err = run(capsys, "check", "--select", "TD9", str(project))
    assert code == 2 and "unknown rule selector" in err


def test_ignore_prefix_and_exit_zero(project, capsys):
    assert run(capsys, "check", "--ignore", "TD0", str(project))[0] == 0
    assert run(capsys, "check", "--exit-zero", str(project))[0] == 0


def test_noqa_on_parse_error_line_is_not_possible_but_per_file_ignores_work(project, capsys):
    write(project, "pyproject.toml", '[tool.traindoctor]\nper-file-ignores = {"pkg/*" = ["TD000"]}\n')
    code, out, _ = run(capsys, "check", str(project))
    assert code == 0, out


def test_config_select_and_cli_override(project, capsys):
    write(project, "pyproject.toml", '[tool.traindoctor]\nignore = ["TD000"]\n')
    assert run(capsys, "check", str(project))[0] == 0
    # ruff's precedence: a command-line --select starts afresh, the configured ignore is gone.
    assert run(capsys, "check", "--select", "TD000", str(project))[0] == 1
    write(project, "pyproject.toml", '[tool.traindoctor]\nignore = ["TD0"]\n')
    assert run(capsys, "check", str(project))[0] == 0
    assert run(capsys, "check", "--select", "TD000", str(project))[0] == 1
    code, _, err = run(capsys, "check", "--config", str(project / "missing.toml"), str(project))
    assert code == 2 and "config file not found" in err


def test_bad_config_is_a_clear_error(project, capsys):
    write(project, "pyproject.toml", "[tool.traindoctor]\nselec = ['TD1']\n")
    code, _, err = run(capsys, "check", str(project))
    assert code == 2 and "unknown [tool.traindoctor] option" in err
    write(project, "pyproject.toml", "[tool.traindoctor\n")
    code, _, err = run(capsys, "check", str(project))
    assert code == 2 and "cannot read" in err


def test_gitignore_and_default_excludes(tmp_path, capsys):
    (tmp_path / ".git").mkdir()
    write(tmp_path, ".gitignore", "generated/\n*_tmp.py\n!keep_tmp.py\n")
    write(tmp_path, "generated/bad.py", "def (:\n")
    write(tmp_path, "x_tmp.py", "def (:\n")
    write(tmp_path, "keep_tmp.py", "def (:\n")
    write(tmp_path, ".venv/lib/bad.py", "def (:\n")
    write(tmp_path, "sub/.gitignore", "local.py\n")
    write(tmp_path, "sub/local.py", "def (:\n")
    write(tmp_path, "sub/other.py", "def (:\n")
    code, out, _ = run(capsys, "check", "--output-format", "json", str(tmp_path))
    files = sorted(Path(f["filename"]).relative_to(tmp_path).as_posix() for f in json.loads(out))
    assert files == ["keep_tmp.py", "sub/other.py"]
    code, out, _ = run(capsys, "check", "--no-respect-gitignore", "--output-format", "json", str(tmp_path))
    assert len(json.loads(out)) == 5  # .venv stays excluded
    # An explicitly named file is always checked.
    code, out, _ = run(capsys, "check", "--output-format", "json", str(tmp_path / "x_tmp.py"))
    assert len(json.loads(out)) == 1


def test_json_fields_follow_ruff(project, capsys):
    code, out, _ = run(capsys, "check", "--output-format", "json", str(project))
    data = json.loads(out)
    assert code == 1 and len(data) == 2
    first = data[1]
    for key in ("code", "message", "filename", "location", "end_location", "fix", "url", "noqa_row"):
        assert key in first
    assert first["name"] == "parse-error" and first["severity"] == "error" and first["origin"] == "static"
    assert first["location"] == {"row": 1, "column": 7}


def _finding_with_fix() -> Finding:
    return Finding(
        code="TD101",
        name="pin-memory-off",
        severity=Severity.WARNING,
        message="Pass it.",
        filename="train.py",
        location=Location(3, 5),
        end_location=Location(3, 20),
        origin=Origin.STATIC,
        fix=Fix("Pass `pin_memory=True`", (Edit(", pin_memory=True", Location(3, 19), Location(3, 19)),)),
    )


def test_sarif_is_valid_against_schema(project, capsys):
    schema = json.loads((DATA / "sarif-2.1.0-subset.schema.json").read_text())
    code, out, _ = run(capsys, "check", "--output-format", "sarif", str(project))
    doc = json.loads(out)
    jsonschema.validate(doc, schema)
    runtime = Finding(
        code="TD102",
        name="loader-in-main-process",
        severity=Severity.WARNING,
        message="m.",
        filename="",
        location=None,
        origin=Origin.RUNTIME,
        evidence={"data_wait_share": 0.5},
        step=3,
    )
    doc = sarif.build([_finding_with_fix(), runtime])
    jsonschema.validate(doc, schema)
    driver = doc["runs"][0]["tool"]["driver"]
    assert [r["id"] for r in driver["rules"]] == [r.code for r in all_rules()]
    result = doc["runs"][0]["results"][0]
    assert driver["rules"][result["ruleIndex"]]["id"] == "TD101"
    assert result["fixes"][0]["artifactChanges"][0]["replacements"][0]["insertedContent"]["text"] == ", pin_memory=True"


def test_github_annotations_escape():
    f = _finding_with_fix().with_(message="a%b\nc", filename="dir,x/train:1.py")
    line = github.render([f]).strip()
    assert line.startswith("::warning file=dir%2Cx/train%3A1.py,line=3,col=5,endLine=3,endColumn=20,")
    assert line.endswith("::TD101 a%25b%0Ac")


def test_statistics(project, capsys):
    code, out, _ = run(capsys, "check", "--statistics", str(project))
    assert out.split() == ["2", "TD000", "parse-error"]


def test_output_file(project, capsys, tmp_path):
    target = tmp_path / "report.json"
    code, out, _ = run(capsys, "check", "--output-format", "json", "-o", str(target), str(project))
    assert code == 1 and out == ""
    assert len(json.loads(target.read_text())) == 2


def test_rule_and_rules_commands(capsys):
    code, out, _ = run(capsys, "rule", "TD000")
    assert code == 0 and out.startswith("# TD000: parse-error") and "## What it does" in out
    code, out, _ = run(capsys, "rule", "parse-error")
    assert code == 0 and "# TD000" in out
    code, _, err = run(capsys, "rule", "TD999")
    assert code == 2 and "unknown rule" in err
    code, out, _ = run(capsys, "rules")
    assert code == 0 and len(out.strip().splitlines()) == len(all_rules())
    code, out, _ = run(capsys, "rules", "--output-format", "json")
    assert [r["code"] for r in json.loads(out)] == [r.code for r in all_rules()]


def test_static_checker_never_imports_torch(project):
    script = (
        "import sys\nfrom traindoctor.cli import main\n"
        f"main(['check', '--exit-zero', {str(project)!r}])\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    src = str(Path(__file__).resolve().parent.parent / "src")
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"}
    )
    assert proc.returncode == 0, proc.stderr


def test_module_entry_point(project):
    src = str(Path(__file__).resolve().parent.parent / "src")
    proc = subprocess.run(
        [sys.executable, "-m", "traindoctor", "check", str(project)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 1 and "TD000" in proc.stdout and "Traceback" not in proc.stderr
