"""Adopting the checker on existing code: ``--baseline``, ``--write-baseline`` and ``--add-noqa``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from traindoctor.check.baseline import fingerprint
from traindoctor.check.noqa import comment_unsafe_rows, with_noqa
from traindoctor.cli import main

ROOT = Path(__file__).resolve().parent.parent
DEPRECATED = "scaler = torch.cuda.amp.GradScaler()\n"  # TD304, one per line it is on
SCALER = "import torch\n\n" + DEPRECATED + "print(scaler)\n"
HELPER = "\n\ndef helper():\n    other = torch.cuda.amp.GradScaler()\n    return other\n"
MAIN = "\n\ndef main():\n    pass\n"
HELPER_LAST = SCALER + MAIN + HELPER  # findings on rows 3 and 12


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["check", "--min-torch-version", "2.13", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def rows_of(out: str, code: str = "TD304") -> list[int]:
    """Rows of the findings of ``code`` in a text report."""
    return [int(line.split(":")[1]) for line in out.splitlines() if f" {code} " in line and line.count(":") >= 3]


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text("[tool.traindoctor]\n")
    (tmp_path / "train.py").write_text(HELPER_LAST)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def baseline_entries(path: Path) -> list[dict]:
    data = json.loads(path.read_text())
    assert data["traindoctor-baseline"] == 1
    return data["findings"]


# -- baselines ----------------------------------------------------------------------------------
def test_write_baseline_records_every_finding_and_reports_nothing(project, capsys):
    code, out, err = run(capsys, ".", "--write-baseline", "baseline.json")
    assert code == 0 and out == ""
    assert "Wrote 2 findings to the baseline baseline.json." in err
    entries = baseline_entries(project / "baseline.json")
    assert [(e["file"], e["code"], e["line"]) for e in entries] == [("train.py", "TD304", 3), ("train.py", "TD304", 12)]
    assert all(len(e["fingerprint"]) == 16 for e in entries)


def test_baseline_hides_old_findings_and_exits_zero(project, capsys):
    run(capsys, ".", "--write-baseline", "baseline.json")
    code, out, err = run(capsys, ".", "--baseline", "baseline.json")
    assert code == 0 and "All checks passed!" in out
    assert "2 findings in the baseline baseline.json not shown." in err


def test_lines_added_above_and_moved_blocks_keep_matching(project, capsys):
    run(capsys, ".", "--write-baseline", "baseline.json")
    # New lines above both findings, and the function holding the second one moved up.
    (project / "train.py").write_text("# a header comment\nimport os\n\n" + SCALER + HELPER + MAIN)
    code, out, _ = run(capsys, ".")
    assert code == 1 and rows_of(out) == [6, 11]  # both still found, on other rows
    code, out, _ = run(capsys, ".", "--baseline", "baseline.json")
    assert code == 0 and "All checks passed!" in out


def test_an_edited_finding_line_is_new(project, capsys):
    run(capsys, ".", "--write-baseline", "baseline.json")
    path = project / "train.py"
    path.write_text(
        path.read_text().replace("other = torch.cuda.amp.GradScaler()", "other = torch.cuda.amp.GradScaler(2.0)")
    )
    code, out, _ = run(capsys, ".", "--baseline", "baseline.json")
    assert code == 1 and rows_of(out) == [12]
    # Whitespace alone does not make a finding new.
    path.write_text(path.read_text().replace("scaler = torch", "scaler =   torch"))
    assert rows_of(run(capsys, ".", "--baseline", "baseline.json")[1]) == [12]


def test_a_removed_finding_drops_out_and_the_ratchet_forgets_it(project, capsys):
    run(capsys, ".", "--write-baseline", "baseline.json")
    path = project / "train.py"
    path.write_text(path.read_text().replace("other = torch.cuda.amp.GradScaler()\n", "other = None\n"))
    code, _, err = run(capsys, ".", "--baseline", "baseline.json")
    assert code == 0 and "1 baseline entry no longer occur" in err
    code, _, err = run(capsys, ".", "--baseline", "baseline.json", "--write-baseline", "baseline.json")
    assert code == 0 and "1 fixed finding dropped from the baseline." in err
    assert [e["line"] for e in baseline_entries(project / "baseline.json")] == [3]
    # The finding comes back: it is new now, and the ratchet does not take it in.
    path.write_text(path.read_text().replace("other = None\n", "other = torch.cuda.amp.GradScaler()\n"))
    code, out, _ = run(capsys, ".", "--baseline", "baseline.json", "--write-baseline", "baseline.json")
    assert code == 1 and rows_of(out) == [12]
    assert len(baseline_entries(project / "baseline.json")) == 1


def test_identical_findings_are_counted(project, capsys):
    path = project / "train.py"
    block = "a = 1\n" + DEPRECATED + "b = 2\n"  # the same line between the same neighbours
    path.write_text("import torch\n" + block * 2)
    run(capsys, ".", "--write-baseline", "baseline.json")
    assert len({e["fingerprint"] for e in baseline_entries(project / "baseline.json")}) == 1
    path.write_text("import torch\n" + block * 3)
    code, out, _ = run(capsys, ".", "--baseline", "baseline.json")
    assert code == 1 and len(rows_of(out)) == 1


def test_ratchet_keeps_entries_of_files_not_checked(project, capsys):
    (project / "other.py").write_text("import torch\n" + DEPRECATED)
    run(capsys, ".", "--write-baseline", "baseline.json")
    code, _, _ = run(capsys, "train.py", "--baseline", "baseline.json", "--write-baseline", "baseline.json")
    assert code == 0
    assert sorted({e["file"] for e in baseline_entries(project / "baseline.json")}) == ["other.py", "train.py"]


def test_baseline_paths_are_relative_to_the_project_root(project, capsys, monkeypatch):
    run(capsys, ".", "--write-baseline", "baseline.json")
    (project / "sub").mkdir()
    monkeypatch.chdir(project / "sub")
    code, out, _ = run(capsys, "..", "--baseline", "../baseline.json")
    assert code == 0 and "All checks passed!" in out


def test_notebook_findings_are_baselined_by_cell_content(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": s}
        for s in (
            ["import torch\n"],
            [DEPRECATED],
        )
    ]
    doc = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "nb.ipynb").write_text(json.dumps(doc, indent=1))
    run(capsys, "nb.ipynb", "--write-baseline", "b.json")
    assert baseline_entries(tmp_path / "b.json")[0]["cell"] == 2
    doc["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": ["# new cell above"]})
    (tmp_path / "nb.ipynb").write_text(json.dumps(doc, indent=1))
    assert run(capsys, "nb.ipynb", "--baseline", "b.json")[0] == 0


def test_sarif_marks_reported_results_new(project, capsys):
    (project / "baseline.json").write_text('{"traindoctor-baseline": 1, "findings": []}\n')
    code, out, _ = run(capsys, ".", "--baseline", "baseline.json", "--output-format", "sarif")
    results = json.loads(out)["runs"][0]["results"]
    assert code == 1 and [r["baselineState"] for r in results] == ["new", "new"]
    code, out, _ = run(capsys, ".", "--output-format", "sarif")
    assert all("baselineState" not in r for r in json.loads(out)["runs"][0]["results"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--baseline", "missing.json", "."], "baseline file not found: missing.json"),
        (["--baseline", "pyproject.toml", "."], "cannot read the baseline pyproject.toml"),
        (["--add-noqa", "--fix", "."], "--add-noqa cannot be combined with --fix or --diff"),
        (["--add-noqa", "--write-baseline", "b.json", "."], "choose one"),
        (["--baseline", "b.json", "-"], "--baseline needs files to read, not stdin"),
    ],
)
def test_bad_uses_are_usage_errors(project, capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_fingerprint_ignores_blank_lines_and_whitespace():
    lines = ["a = 1\n", "\n", "  b =  2\n", "c = 3\n"]
    assert fingerprint(lines, 3) == fingerprint(["a = 1\n", "b = 2\n", "\n", "\n", "c = 3\n"], 2)
    assert fingerprint(lines, 3) != fingerprint(["a = 1\n", "b = 22\n", "c = 3\n"], 2)
    assert fingerprint(lines, 99) == fingerprint([], 1)


# -- --add-noqa ---------------------------------------------------------------------------------
def test_add_noqa_silences_every_finding_and_is_idempotent(project, capsys):
    code, out, err = run(capsys, ".", "--add-noqa")
    assert code == 0 and out == "" and "Added 2 noqa directives." in err
    once = (project / "train.py").read_bytes()
    assert once.count(b"  # noqa: TD304\n") == 2
    code, out, err = run(capsys, ".", "--add-noqa")
    assert code == 0 and "Added 0 noqa directives." in err
    assert (project / "train.py").read_bytes() == once
    assert run(capsys, ".")[0] == 0


def test_add_noqa_keeps_every_other_byte(tmp_path, capsys):
    # CRLF and CR line endings, a latin-1 coding cookie, trailing whitespace, no final newline.
    path = tmp_path / "legacy.py"
    original = (
        b"# -*- coding: latin-1 -*-\r\nimport torch\r\n# caf\xe9  \r\n"
        b"scaler = torch.cuda.amp.GradScaler()\r\n\rx = 1  \r\nlast = torch.cuda.amp.GradScaler()"
    )
    path.write_bytes(original)
    code, _, _ = run(capsys, str(path), "--add-noqa")
    assert code == 0
    expected = original.replace(b"GradScaler()\r\n", b"GradScaler()  # noqa: TD304\r\n")
    expected = expected[: -len(b"GradScaler()")] + b"GradScaler()  # noqa: TD304"
    assert path.read_bytes() == expected
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbfimport torch\n" + DEPRECATED.encode())
    run(capsys, str(bom), "--add-noqa")
    assert bom.read_bytes() == b"\xef\xbb\xbfimport torch\n" + DEPRECATED.encode().replace(b"\n", b"  # noqa: TD304\n")


def test_add_noqa_merges_with_an_existing_noqa_comment(tmp_path, capsys):
    path = tmp_path / "t.py"
    path.write_text("import torch\nscaler = torch.cuda.amp.GradScaler()  # noqa: E501 (long)\n")
    run(capsys, str(path), "--add-noqa")
    assert path.read_text() == "import torch\nscaler = torch.cuda.amp.GradScaler()  # noqa: E501, TD304 (long)\n"
    assert run(capsys, str(path))[0] == 0


def test_with_noqa():
    assert with_noqa("x = f()\n", ["TD102", "TD101"]) == "x = f()  # noqa: TD101, TD102\n"
    assert with_noqa("x = f()  # noqa\r\n", ["TD102"]) == "x = f()  # noqa\r\n"
    assert with_noqa("x = f()  # noqa: TD1\n", ["TD102"]) == "x = f()  # noqa: TD1\n"
    assert with_noqa("x = f()  # keep  # NOQA:TD3\n", ["TD102"]) == "x = f()  # keep  # NOQA:TD3, TD102\n"
    assert with_noqa("x = f()", ["TD102"]) == "x = f()  # noqa: TD102"


def test_comment_unsafe_rows():
    source = 'a = f("""x\ny""")\nb = 1 + \\\n    2\nc = f"""{a}\n"""\nd = 1\n'
    assert comment_unsafe_rows(source) == {1, 3, 5}
    assert comment_unsafe_rows('x = """never closed\n') is None


def test_add_noqa_skips_lines_that_end_inside_a_string(tmp_path, capsys):
    path = tmp_path / "t.py"
    original = 'import torch\nscaler = torch.cuda.amp.GradScaler(); doc = """\ntext\n"""\n'
    path.write_text(original)
    code, _, err = run(capsys, str(path), "--add-noqa")
    assert code == 1 and "no noqa added for TD304" in err and "inside a string" in err
    assert path.read_text() == original


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_add_noqa_reads_the_lines_as_the_file_ends_them(tmp_path, capsys, ending):
    """In a CR-only file too, a line that ends inside a string gets no comment (it would change the
    string), and the comment on another line goes before that line's own ending."""
    path = tmp_path / "t.py"
    original = f'import torch{ending}scaler = torch.cuda.amp.GradScaler(); doc = """{ending}text{ending}"""{ending}'
    other = f"other = torch.cuda.amp.GradScaler(){ending}"
    path.write_bytes((original + other).encode())
    code, _, err = run(capsys, str(path), "--add-noqa")
    assert code == 1 and "no noqa added for TD304" in err and "inside a string" in err
    assert path.read_bytes() == (original + other.replace(ending, "  # noqa: TD304" + ending)).encode()
    assert comment_unsafe_rows(original) == {2, 3}


def test_add_noqa_in_a_notebook_changes_only_the_cell_source(tmp_path, capsys):
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Title"]},
        {"cell_type": "code", "metadata": {"x": 1}, "outputs": [], "execution_count": 3, "source": ["import torch\n"]},
        {
            "cell_type": "code",
            "metadata": {},
            "outputs": [],
            "execution_count": 4,
            "source": ["y = 1\n", DEPRECATED.rstrip("\n")],
        },
    ]
    text = json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"
    path = tmp_path / "nb.ipynb"
    path.write_text(text)
    code, _, _ = run(capsys, str(path), "--add-noqa")
    assert code == 0
    assert path.read_text() == text.replace('GradScaler()"', 'GradScaler()  # noqa: TD304"')
    assert run(capsys, str(path))[0] == 0


# -- pre-commit ---------------------------------------------------------------------------------
def test_pre_commit_hooks():
    hooks = {h["id"]: h for h in yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())}
    assert hooks["traindoctor"]["entry"] == "traindoctor check --force-exclude"
    baseline = hooks["traindoctor-baseline"]
    assert baseline["entry"].startswith("traindoctor check --force-exclude --baseline ")
    assert baseline["types_or"] == hooks["traindoctor"]["types_or"]


def test_the_baseline_hook_entry_runs_on_changed_files(project, capsys):
    entry = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())[1]["entry"].split()
    baseline_file = entry[entry.index("--baseline") + 1]
    run(capsys, ".", "--write-baseline", baseline_file)
    # pre-commit appends the changed files to the entry's arguments.
    assert main([*entry[1:], "train.py"]) == 0
    (project / "new.py").write_text("import torch\n" + DEPRECATED)
    assert main([*entry[1:], "train.py", "new.py"]) == 1
