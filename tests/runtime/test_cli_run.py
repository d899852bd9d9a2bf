"""`traindoctor run`: script as __main__, exit codes, exceptions, Ctrl-C, JSON shape, -m."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from traindoctor.doctor.cli import main, parse_args

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

LOOP = textwrap.dedent(
    """
    import json, sys, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 24
        def __getitem__(self, i):
            time.sleep(0.003)
            return torch.ones(4) * i, torch.zeros(1)

    def train():
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for x, y in DataLoader(Slow(), batch_size=4):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    if __name__ == "__main__":
        with open(sys.argv[1], "w") as fh:
            json.dump({"argv": sys.argv, "path0": sys.path[0], "name": __name__}, fh)
        train()
    """
)


def _script(tmp_path: Path, tail: str = "") -> Path:
    path = tmp_path / "train.py"
    path.write_text(LOOP + textwrap.dedent(tail))
    return path


def test_runs_script_as_main_with_its_argv_and_path(tmp_path: Path, capsys) -> None:
    script = _script(tmp_path)
    facts = tmp_path / "facts.json"
    saved = list(sys.argv), list(sys.path)
    code = main(["--select", "TD102", str(script), str(facts), "--lr", "3"])
    assert code == 0
    seen = json.loads(facts.read_text())
    assert seen == {"argv": [str(script), str(facts), "--lr", "3"], "path0": str(tmp_path), "name": "__main__"}
    assert (list(sys.argv), list(sys.path)) == saved  # restored for the caller
    out = capsys.readouterr().out
    row, col = next(
        (i, line.index("DataLoader(") + 1) for i, line in enumerate(LOOP.splitlines(), 1) if "in DataLoader(" in line
    )
    assert f"{script}:{row}:{col}: TD102" in out  # the call's column, as the checker reports it
    assert "data_wait_share:" in out and "Profile:" in out


def test_json_report_shape(tmp_path: Path) -> None:
    script = _script(tmp_path)
    report_path = tmp_path / "report.json"
    code = main(
        [
            "--output-format",
            "json",
            "-o",
            str(report_path),
            "--select",
            "TD1",
            str(script),
            str(tmp_path / "facts.json"),
        ]
    )
    assert code == 0
    report = json.loads(report_path.read_text())
    assert sorted(report) == ["environment", "findings", "notes", "partial", "profile", "timeline"]
    (finding,) = report["findings"]
    assert finding["code"] == "TD102" and finding["name"] == "loader-in-main-process"
    assert finding["filename"] == str(script) and finding["location"]["row"] > 0
    assert finding["origin"] == "runtime" and finding["step"] == 6
    assert finding["evidence"]["batches"] == 6
    assert report["profile"]["steps"] == 6 and report["profile"]["verdict"]
    assert report["environment"]["exit_code"] == 0
    assert report["environment"]["command"][0] == str(script)
    assert report["partial"] is False


def test_threshold_and_ignore_options(tmp_path: Path, capsys) -> None:
    script = _script(tmp_path)
    facts = str(tmp_path / "facts.json")
    assert main(["--threshold", "TD102.min_wait_share=0.999", str(script), facts]) == 0
    assert "TD102" not in capsys.readouterr().out
    assert main(["--ignore", "TD102", str(script), facts]) == 0
    assert "TD102" not in capsys.readouterr().out


def test_sys_exit_code_is_preserved_and_report_written(tmp_path: Path) -> None:
    script = _script(tmp_path, "    sys.exit(3)\n")
    out = tmp_path / "r.json"
    assert main(["--output-format", "json", "-o", str(out), str(script), str(tmp_path / "f")]) == 3
    report = json.loads(out.read_text())
    assert report["environment"]["exit_code"] == 3 and report["profile"]["steps"] == 6


@pytest.mark.parametrize("call, code", [("sys.exit(3)", 3), ("sys.exit('bad data')", 1), ("sys.exit(0)", 0)])
def test_a_non_zero_sys_exit_marks_the_report_partial(tmp_path: Path, call: str, code: int) -> None:
    script = _script(tmp_path, f"    {call}\n")
    out = tmp_path / "r.json"
    assert main(["--output-format", "json", "-o", str(out), str(script), str(tmp_path / "f")]) == code
    report = json.loads(out.read_text())
    assert report["partial"] is (code != 0) and report["profile"]["partial"] is (code != 0)
    reason = report["environment"]["partial_reason"]
    assert reason == (f"the script exited with status {code}" if code else None)


def test_exception_prints_the_traceback_and_still_reports(tmp_path: Path, capsys) -> None:
    script = _script(tmp_path, "    raise ValueError('bad config')\n")
    out = tmp_path / "r.json"
    assert main(["--output-format", "json", "-o", str(out), str(script), str(tmp_path / "f")]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last):" in err
    assert "ValueError: bad config" in err and str(script) in err
    assert "runpy" not in err and "traindoctor/doctor/cli.py" not in err
    assert json.loads(out.read_text())["findings"][0]["code"] == "TD102"


def test_keyboard_interrupt_marks_the_report_partial(tmp_path: Path) -> None:
    script = _script(tmp_path, "    raise KeyboardInterrupt\n")
    out = tmp_path / "r.json"
    assert main(["--output-format", "json", "-o", str(out), str(script), str(tmp_path / "f")]) == 130
    report = json.loads(out.read_text())
    assert report["partial"] is True and report["profile"]["partial"] is True


def test_dash_m_runs_a_module(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "mytrainer").mkdir()
    (tmp_path / "mytrainer" / "__init__.py").write_text("")
    (tmp_path / "mytrainer" / "__main__.py").write_text(LOOP)
    monkeypatch.chdir(tmp_path)
    facts = tmp_path / "facts.json"
    out = tmp_path / "r.json"
    code = main(["--output-format", "json", "-o", str(out), "-m", "mytrainer", str(facts)])
    assert code == 0
    seen = json.loads(facts.read_text())
    assert seen["name"] == "__main__" and seen["argv"][1:] == [str(facts)]
    assert seen["argv"][0].endswith(os.path.join("mytrainer", "__main__.py"))
    assert [f["code"] for f in json.loads(out.read_text())["findings"]] == ["TD102"]


def test_usage_errors_are_messages_not_tracebacks(tmp_path: Path, capsys) -> None:
    assert main([]) == 2
    assert main(["--bogus", "x.py"]) == 2
    assert main([str(tmp_path / "missing.py")]) == 2
    assert main(["--select", "TD999", str(_script(tmp_path))]) == 2
    assert main(["-m", "no_such_module_xyz"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "missing SCRIPT" in err and "unknown option" in err
    assert main(["--help"]) == 0


def test_options_stop_at_the_script() -> None:
    opts = parse_args(["--threshold", "TD102.min_wait_ms=7", "train.py", "--select", "x", "-o", "y"])
    assert opts.script == "train.py" and opts.args == ["--select", "x", "-o", "y"]
    assert opts.thresholds == {"TD102.min_wait_ms": 7}
    opts = parse_args(["-mpkg.train", "--epochs", "2"])
    assert opts.module == "pkg.train" and opts.args == ["--epochs", "2"]


def test_process_exit_code_through_the_real_command(tmp_path: Path) -> None:
    script = _script(tmp_path, "    sys.exit(5)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(
        [sys.executable, "-m", "traindoctor", "run", str(script), str(tmp_path / "f")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 5, proc.stderr
    assert "TD102" in proc.stdout and "Profile:" in proc.stdout


def test_recipes_example_is_clean_under_run(tmp_path: Path) -> None:
    """Issue 5: the script built from the recipes has nothing to report, statically or at runtime."""
    report = tmp_path / "report.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "traindoctor",
            "run",
            "--output-format",
            "json",
            "-o",
            str(report),
            str(ROOT / "examples" / "recipes_train.py"),
            "--out",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(report.read_text())
    assert data["findings"] == [], data["findings"]
    assert data["notes"] == [] and data["partial"] is False
    assert data["profile"]["steps"] > 0 and (tmp_path / "run" / "last.pt").exists()


BROKEN = textwrap.dedent(
    """
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Broken(Dataset):
        def __len__(self):
            return 16
        def __getitem__(self, i):
            if i == 9:
                raise ValueError("corrupt sample 9")
            return torch.ones(4), torch.zeros(1)

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        torch.save(model.state_dict(), {missing!r})
    except RuntimeError as exc:
        saved_error = exc
    for x, y in DataLoader(Broken(), batch_size=4):
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        if {chain!r}:
            raise OSError("could not checkpoint") from saved_error
    """
)


@pytest.mark.parametrize("chain", [False, True])
def test_user_traceback_hides_probe_wrappers(tmp_path: Path, capsys, chain: bool) -> None:
    """The probes wrap DataLoader.__next__ and torch.save; their frames are not the user's story."""
    script = tmp_path / "broken.py"
    script.write_text(BROKEN.format(missing=str(tmp_path / "no" / "dir" / "x.pt"), chain=chain))
    assert main(["--select", "TD102", str(script)]) == 1
    err = capsys.readouterr().err
    probes = os.path.join("traindoctor", "runtime", "probes")
    assert probes not in err and "traindoctor/doctor/cli.py" not in err
    if chain:
        assert "OSError: could not checkpoint" in err and "direct cause" in err
        assert "torch.save(model.state_dict()" in err and "serialization.py" in err
    else:
        assert err.count("Traceback (most recent call last):") == 1
        assert "in __getitem__" in err and "ValueError: corrupt sample 9" in err
        assert "for x, y in DataLoader(Broken(), batch_size=4):" in err
        assert "dataloader.py" in err  # torch's own frames stay, as in an unwatched run
