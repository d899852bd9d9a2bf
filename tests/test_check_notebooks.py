"""Notebooks: checked cell by cell as one program, located by cell, fixed inside the cell only."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from traindoctor.check.notebook import read_notebook
from traindoctor.cli import main

DATA = Path(__file__).parent / "data"

DEPRECATED = "scaler = torch.cuda.amp.GradScaler()\n"
FIXED = 'scaler = torch.amp.GradScaler("cuda")\n'


def code(source, outputs=None, count=1):
    return {"cell_type": "code", "execution_count": count, "metadata": {}, "outputs": outputs or [], "source": source}


def markdown(text):
    return {"cell_type": "markdown", "metadata": {}, "source": [text]}


def notebook(*cells, indent=1) -> str:
    doc = {
        "cells": list(cells),
        "metadata": {"kernelspec": {"name": "python3", "language": "python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    return json.dumps(doc, indent=indent, ensure_ascii=False) + "\n"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code_ = main(["check", "--min-torch-version", "2.13", *argv])
    out, err = capsys.readouterr()
    return code_, out, err


def training_notebook() -> str:
    return notebook(
        markdown("# Training\n"),
        code(["%matplotlib inline\n", "import torch\n", "!pip install tqdm"]),
        markdown("Scaler:"),
        code(
            ["model = None\n", DEPRECATED, "x = 1"],
            outputs=[
                {"output_type": "stream", "name": "stdout", "text": ["résumé ✓\n"]},
                {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo=\n"}, "metadata": {}},
            ],
        ),
        code(["%%bash\n", "echo 'this is not python' (\n"]),
        code("with torch.cuda.amp.autocast():\n    y = 2\n"),
    )


def test_findings_are_located_by_cell_and_row_in_text_json_and_sarif(tmp_path, capsys):
    nb = tmp_path / "train.ipynb"
    nb.write_text(training_notebook(), encoding="utf-8")
    code_, out, err = run(capsys, str(nb))
    assert code_ == 1, err
    # Cell 4 on screen (markdown cells count, as in ruff), row 2 of that cell.
    assert f"{nb}:cell 4:2:10: TD304" in out
    assert " 2 | scaler = torch.cuda.amp.GradScaler()" in out
    assert f"{nb}:cell 6:1:6: TD304" in out
    assert "TD000" not in out  # magics, shell escapes and the %%bash cell are not Python errors

    code_, out, _ = run(capsys, "--output-format", "json", str(nb))
    data = json.loads(out)
    assert [(d["cell"], d["location"]["row"], d["location"]["column"]) for d in data] == [(4, 2, 10), (6, 1, 6)]
    edit = data[0]["fix"]["edits"][0]
    assert edit["location"]["row"] == 2 and edit["end_location"]["row"] == 2

    code_, out, _ = run(capsys, "--output-format", "sarif", str(nb))
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads((DATA / "sarif-2.1.0-subset.schema.json").read_text()))
    result = doc["runs"][0]["results"][0]
    assert result["message"]["text"].startswith("cell 4, line 2: ")
    assert result["properties"]["cell"] == 4 and result["properties"]["row"] == 2
    # A region would count lines of the JSON file, not of the cell: none is given.
    assert "region" not in result["locations"][0]["physicalLocation"]

    code_, out, _ = run(capsys, "--output-format", "github", str(nb))
    assert "line=" not in out.splitlines()[0] and "::cell 4:2:10: TD304" in out


def test_plain_files_have_cell_null_in_json(tmp_path, capsys):
    (tmp_path / "t.py").write_text("import torch\n" + DEPRECATED)
    data = json.loads(run(capsys, "--output-format", "json", str(tmp_path / "t.py"))[1])
    assert data[0]["cell"] is None and data[0]["location"]["row"] == 2


def test_cells_form_one_program(tmp_path, capsys):
    # `torch` is imported in cell 1 and used in cell 2: the finding needs both cells.
    nb = tmp_path / "nb.ipynb"
    nb.write_text(notebook(code(["import torch\n"]), code([DEPRECATED])))
    assert f"{nb}:cell 2:1:10: TD304" in run(capsys, str(nb))[1]
    nb.write_text(notebook(code(["x = 1\n"]), code([DEPRECATED])))
    assert run(capsys, str(nb))[0] == 0


def test_ipython_syntax_is_skipped_and_rows_stay_right(tmp_path, capsys):
    nb = tmp_path / "nb.ipynb"
    nb.write_text(
        notebook(
            code(
                [
                    "import torch\n",
                    "%load_ext autoreload\n",
                    "files = !ls\n",
                    "torch.cuda?\n",
                    "for i in range(2):\n",
                    "    !echo $i\n",
                    "!pip install a \\\n",
                    "    b\n",
                    DEPRECATED,
                ]
            ),
            code(["%%writefile x.py\n", "def broken(:\n"]),
            code(["%%time\n", DEPRECATED]),
        )
    )
    code_, out, _ = run(capsys, str(nb))
    assert "TD000" not in out
    assert f"{nb}:cell 1:9:10: TD304" in out
    # %%time runs its body as Python: checked, the magic line itself is not.
    assert f"{nb}:cell 3:2:10: TD304" in out


def test_percent_operator_continuation_is_not_a_magic():
    nb = read_notebook(notebook(code(["x = (10\n", "     % 3)\n"])).encode())
    assert nb.source == "x = (10\n     % 3)\n"


def test_syntax_error_in_a_cell_is_td000_located_in_that_cell(tmp_path, capsys):
    nb = tmp_path / "nb.ipynb"
    nb.write_text(notebook(code(["import torch\n"]), markdown("m"), code(["x = 1\n", "def f(:\n"])))
    code_, out, err = run(capsys, str(nb))
    assert code_ == 1 and f"{nb}:cell 3:2:5: TD000 SyntaxError" in out and "Traceback" not in err


def test_a_cell_marked_as_another_language_is_not_checked(tmp_path, capsys):
    # a pasted training log kept in a code cell that VS Code marks "plaintext" (Time-Series-Library)
    log = code(["\titers: 100, epoch: 1 | loss: 0.4701951\n", "Epoch: 1 cost time: 30.09\n"])
    log["metadata"] = {"vscode": {"languageId": "plaintext"}}
    nb = tmp_path / "nb.ipynb"
    nb.write_text(notebook(code(["import torch\n", DEPRECATED]), log, code(["x = 1\n"])))
    code_, out, _ = run(capsys, str(nb), "--select", "TD000,TD304")
    assert "TD000" not in out and f"{nb}:cell 1:2" in out and "TD304" in out
    log["metadata"] = {"vscode": {"languageId": "python"}}
    nb.write_text(notebook(code(["import torch\n", DEPRECATED]), log, code(["x = 1\n"])))
    code_, out, _ = run(capsys, str(nb), "--select", "TD000,TD304")
    assert "TD000" in out  # marked Python: a syntax error is still one


@pytest.mark.parametrize(
    "content, reason",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "no 'cells' list"),
        ('{"cells": [{"cell_type": "code", "source": 3}]}', "neither text nor a list"),
        (b"\xff\xfe{", "not UTF-8"),
    ],
)
def test_broken_notebook_is_td000_never_a_traceback(tmp_path, capsys, content, reason):
    nb = tmp_path / "broken.ipynb"
    nb.write_bytes(content if isinstance(content, bytes) else content.encode())
    (tmp_path / "ok.py").write_text("x = 1\n")
    code_, out, err = run(capsys, str(tmp_path))
    assert code_ == 1 and "Traceback" not in out + err and "internal error" not in err
    assert f"{nb}:1:1: TD000 Cannot read the notebook" in out and reason in out
    assert "in 2 files" in out


def test_fix_edits_cell_sources_and_keeps_every_other_byte(tmp_path, capsys):
    original = training_notebook()
    nb = tmp_path / "train.ipynb"
    nb.write_bytes(original.encode("utf-8"))
    code_, out, err = run(capsys, "--fix", str(nb))
    assert code_ == 0, out + err
    assert "Fixed 2 findings." in out
    expected = original.replace(json.dumps(DEPRECATED), json.dumps(FIXED)).replace(
        json.dumps("with torch.cuda.amp.autocast():\n    y = 2\n"),
        json.dumps('with torch.autocast("cuda"):\n    y = 2\n'),
    )
    assert expected != original
    assert nb.read_bytes() == expected.encode("utf-8")
    # The notebook still loads and its magics are untouched.
    cells = json.loads(nb.read_text())["cells"]
    assert cells[1]["source"] == ["%matplotlib inline\n", "import torch\n", "!pip install tqdm"]
    assert cells[3]["outputs"][0]["text"] == ["résumé ✓\n"]
    assert not list(tmp_path.glob(".*tmp*"))


@pytest.mark.parametrize("indent", [None, 2])
def test_fix_follows_the_notebooks_own_json_layout(tmp_path, capsys, indent):
    original = notebook(code(["import torch\n", DEPRECATED, "y = 'é'"]), indent=indent)
    nb = tmp_path / "nb.ipynb"
    nb.write_text(original, encoding="utf-8")
    assert run(capsys, "--fix", str(nb))[0] == 0
    assert nb.read_text(encoding="utf-8") == original.replace(json.dumps(DEPRECATED), json.dumps(FIXED))


def test_fix_keeps_ascii_escaped_notebooks_escaped(tmp_path, capsys):
    doc = json.loads(notebook(code(["import torch\n", DEPRECATED, "y = 'é'\n"])))
    original = json.dumps(doc, indent=1)  # ensure_ascii: é written as \u00e9
    nb = tmp_path / "nb.ipynb"
    nb.write_text(original)
    assert run(capsys, "--fix", str(nb))[0] == 0
    assert nb.read_text() == original.replace(json.dumps(DEPRECATED), json.dumps(FIXED))


def test_diff_shows_cells_and_changes_nothing(tmp_path, capsys):
    nb = tmp_path / "train.ipynb"
    nb.write_text(training_notebook())
    before = nb.read_bytes()
    code_, out, err = run(capsys, "--diff", str(nb))
    assert code_ == 1 and nb.read_bytes() == before
    assert f"--- {nb}:cell 4\n+++ {nb}:cell 4\n" in out
    assert f"-{DEPRECATED}+{FIXED}" in out
    assert "Would fix 2 findings." in err


def test_fix_that_adds_and_removes_lines_maps_back_to_cells():
    nb = read_notebook(
        notebook(code(["import torch\n", "%time x = 1\n"]), markdown("m"), code(["a = 1\n", "b = 2"])).encode()
    )
    assert nb.source == "import torch\npass\na = 1\nb = 2\n"
    changed = nb.cells_after("import os\nimport torch\npass\na = 1\nc = 0\nb = 2\n")
    # Lines added at the top go to the first cell; magic lines come back as they were.
    assert changed == {0: "import os\nimport torch\n%time x = 1\n", 1: "a = 1\nc = 0\nb = 2"}
    assert nb.cells_after(nb.source) == {}


def test_noqa_works_inside_cells(tmp_path, capsys):
    nb = tmp_path / "nb.ipynb"
    nb.write_text(notebook(code(["import torch\n", DEPRECATED.rstrip("\n") + "  # noqa: TD304\n"])))
    assert run(capsys, str(nb))[0] == 0


def test_folder_scan_includes_notebooks_but_not_checkpoints(tmp_path, capsys):
    (tmp_path / "nb.ipynb").write_text(notebook(code(["import torch\n", DEPRECATED])))
    (tmp_path / ".ipynb_checkpoints").mkdir()
    (tmp_path / ".ipynb_checkpoints" / "nb-checkpoint.ipynb").write_text(notebook(code(["import torch\n", DEPRECATED])))
    code_, out, _ = run(capsys, "--output-format", "json", str(tmp_path))
    assert [Path(d["filename"]).name for d in json.loads(out)] == ["nb.ipynb"]


def test_notebook_on_stdin(tmp_path, capsys, monkeypatch):
    import io
    import sys

    monkeypatch.setattr(
        sys, "stdin", io.TextIOWrapper(io.BytesIO(notebook(code(["import torch\n", DEPRECATED])).encode()))
    )
    code_, out, _ = run(capsys, "--stdin-filename", "nb.ipynb", "-")
    assert code_ == 1 and "nb.ipynb:cell 1:2:10: TD304" in out


# ------------------------------------------------------------------ IPython syntax in cells


def code_cells_notebook(*sources: str) -> str:
    """A notebook of code cells only, one per source, without kernel metadata."""
    cells = [{"cell_type": "code", "execution_count": 1, "metadata": {}, "outputs": [], "source": s} for s in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


def check_output(capsys, *argv: str) -> tuple[int, str]:
    """:func:`run` without the cache: the exit code and the output."""
    code_, out, _ = run(capsys, "--no-cache", *argv)
    return code_, out


def test_wildcard_help_is_ipython_syntax_not_a_syntax_error(tmp_path, capsys):
    nb = tmp_path / "tensors.ipynb"
    nb.write_text(
        code_cells_notebook(
            "import torch\n", "# all the tensor types\ntorch.*Tensor?\n", "scaler = torch.cuda.amp.GradScaler()\n"
        )
    )
    code, out = check_output(capsys, str(nb))
    assert "TD000" not in out
    assert f"{nb}:cell 3:1:10: TD304" in out and code == 1


def test_a_cell_indented_as_a_whole_runs_dedented_as_ipython_does(tmp_path, capsys):
    nb = tmp_path / "vit.ipynb"
    nb.write_text(
        code_cells_notebook("import torch\n", " # parameters\n scaler = torch.cuda.amp.GradScaler()\n scaler")
    )
    code, out = check_output(capsys, str(nb))
    assert "TD000" not in out
    # Located in the cell as written: column 11, one more than the dedented line's.
    assert f"{nb}:cell 2:2:11: TD304" in out and code == 1


def test_fixing_an_indented_cell_keeps_its_indentation(tmp_path, capsys):
    nb = tmp_path / "vit.ipynb"
    nb.write_text(code_cells_notebook("import torch\n", "  scaler = torch.cuda.amp.GradScaler()\n  scaler"))
    code, out = check_output(capsys, "--fix", str(nb))
    cells = json.loads(nb.read_text())["cells"]
    assert "".join(cells[1]["source"]) == '  scaler = torch.amp.GradScaler("cuda")\n  scaler', out
    assert read_notebook(nb.read_bytes()).source.startswith("import torch\n")


def test_an_indented_line_that_is_a_real_error_is_still_td000(tmp_path, capsys):
    nb = tmp_path / "bad.ipynb"
    nb.write_text(code_cells_notebook("import torch\n", "x = 1\n  y = 2\n"))
    code, out = check_output(capsys, str(nb))
    assert f"{nb}:cell 2:2" in out and "TD000" in out
