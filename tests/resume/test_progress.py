"""``verify-resume`` shows its three runs as progress lines on stderr (plain lines: not a TTY)."""

from __future__ import annotations

from pathlib import Path

from traindoctor.resume.cli import main

SCRIPTS = Path(__file__).parent / "scripts"


def test_the_three_runs_are_reported_as_plain_progress_lines(capsys):
    code = main(
        [
            str(SCRIPTS / "full_state.py"),
            "--resume-args",
            "--resume",
            "--steps",
            "6",
            "--interrupt-at",
            "2",
            "--output-format",
            "json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert captured.err.splitlines() == [
        "traindoctor verify-resume [1/3] interrupted run (checkpoint at or after step 2): checkpoint at step 3",
        "traindoctor verify-resume [2/3] resumed and reference runs: resumed run",
        "traindoctor verify-resume [3/3] reference run",
    ]
    assert captured.out.lstrip().startswith("{")  # the JSON on stdout stays clean
