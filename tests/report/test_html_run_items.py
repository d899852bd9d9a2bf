"""The run page's items from issue 25: a Fix box on every finding (a runtime finding that names
its fix only in its message gets the rule's documented fix), and a word when step times varied
more than 2x (p90/median)."""

from __future__ import annotations

from traindoctor.report.html import render_run_html


def _report(per_step_ms: dict, findings: list) -> dict:
    return {"findings": findings, "profile": {"verdict": "compute-bound", "per_step_ms": per_step_ms, "steps": 20}}


def _finding(code: str, help_text: str | None) -> dict:
    return {
        "code": code,
        "name": "x",
        "severity": "warning",
        "message": "m",
        "filename": "train.py",
        "location": {"row": 3, "column": 1},
        "fix": None,
        "help": help_text,
    }


def test_every_finding_gets_a_fix_box() -> None:
    per = {"step": 4.0, "median_step": 4.0, "p90_step": 5.0, "compute": 3.0, "optimizer": 1.0}
    page = render_run_html(
        _report(per, [_finding("TD204", None), _finding("TD103", "Pass `persistent_workers=True`.")])
    )
    assert page.count('<div class="fix">') == 2
    assert "param_groups(model, weight_decay=0.05)" in page  # TD204's documented "Use instead"
    assert "<b>Fix.</b> Pass <code>persistent_workers=True</code>." in page  # its own help first
    assert 'id="step-spread"' not in page  # 5 ms against a median of 4: no word


def test_step_times_that_varied_more_than_twice_get_a_word() -> None:
    per = {"step": 6.0, "median_step": 4.0, "p90_step": 12.0, "compute": 5.0, "optimizer": 1.0}
    page = render_run_html(_report(per, []))
    assert "Step times varied 3.0x: the slowest tenth of the steady steps took 12 ms or more" in page
    assert "against a median of 4 ms" in page
