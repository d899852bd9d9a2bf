"""The one script runner of run, verify-resume and tune trials (traindoctor.runtime.script)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from traindoctor.runtime.script import EXIT_INTERRUPTED, ScriptRunner


def _run(
    tmp_path: Path, body: str, stops: dict[type[BaseException], int] | None = None
) -> tuple[int, BaseException | None]:
    script = tmp_path / "train.py"
    script.write_text(body)
    outcome = ScriptRunner(str(script), ["--epochs", "2"], stops=stops).run()
    return outcome.code, outcome.error


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("x = 1\n", 0),
        ("import sys\nsys.exit()\n", 0),
        ("import sys\nsys.exit(3)\n", 3),
        ("import sys\nsys.exit(256 + 4)\n", 4),
        ("import sys\nsys.exit(-1)\n", 255),
        ("import sys\nsys.exit(True)\n", 1),
        ("import sys\nsys.exit('bad input')\n", 1),
    ],
)
def test_exit_codes_follow_python(tmp_path: Path, body: str, code: int) -> None:
    assert _run(tmp_path, body) == (code, None)


def test_an_error_prints_the_users_traceback_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, error = _run(tmp_path, "def f():\n    raise ValueError('boom')\nf()\n")
    assert code == 1 and isinstance(error, ValueError)
    err = capsys.readouterr().err
    assert "train.py" in err and "ValueError: boom" in err
    assert "runpy" not in err and "script.py" not in err


def test_ctrl_c_and_stops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, error = _run(tmp_path, "raise KeyboardInterrupt\n")
    assert code == EXIT_INTERRUPTED and isinstance(error, KeyboardInterrupt)
    assert "KeyboardInterrupt" in capsys.readouterr().err
    # a stop the caller raises on purpose (a subclass counts): its code, no traceback
    code, error = _run(tmp_path, "raise KeyError('stop')\n", stops={LookupError: 143})
    assert code == 143 and isinstance(error, KeyError)
    assert capsys.readouterr().err == ""


def test_argv_and_path_are_the_scripts_then_restored(tmp_path: Path) -> None:
    argv, path = list(sys.argv), list(sys.path)
    body = "import json, sys\nopen('seen.json', 'w').write(json.dumps([sys.argv, sys.path[0]]))\n"
    (tmp_path / "sub").mkdir()
    script = tmp_path / "sub" / "train.py"
    script.write_text(body.replace("seen.json", str(tmp_path / "seen.json")))
    assert ScriptRunner(str(script), ["-x"]).run().code == 0
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen == [[str(script), "-x"], str(tmp_path / "sub")]
    assert sys.argv == argv and sys.path == path
