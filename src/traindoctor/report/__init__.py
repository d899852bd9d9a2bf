"""Reporters: render a list of findings. They never branch on a finding's origin."""

from __future__ import annotations

from collections.abc import Callable

from traindoctor.finding import Finding


def get_reporter(name: str) -> Callable[[list[Finding]], str]:
    if name == "json":
        from traindoctor.report.json_report import render
    elif name == "sarif":
        from traindoctor.report.sarif import render
    elif name == "github":
        from traindoctor.report.github import render
    else:
        from traindoctor.report.text import render
    return render
