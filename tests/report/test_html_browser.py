"""The HTML reports in headless Chromium: they load without console errors and draw their charts.

Skipped, with the reason, where Chromium is absent (``.ci/run`` installs Debian's ``chromium``)
or where plotly (the ``html`` extra) is not installed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from traindoctor.report.html_charts import step_parts

pytest.importorskip("plotly", reason="the html extra (plotly) is not installed: pip install 'traindoctor[html]'")

import chromium
from html_fixtures import resume_result, run_report, tune_result

from traindoctor.report.html import render_resume_html, render_tune_html, write_html

pytestmark = pytest.mark.skipif(chromium.find_chromium() is None, reason=chromium.SKIP_REASON)


def _charts(dom: str) -> dict[str, str]:
    """The DOM of each ``<figure class="chart">`` by its chart name."""
    out = {}
    for piece in dom.split('<figure class="chart" data-chart="')[1:]:
        name, rest = piece.split('"', 1)
        out[name] = rest.split("</figure>", 1)[0]
    return out


def _assert_clean(dom: str, console: list[str]) -> None:
    assert console == []
    assert '<div id="td-errors" role="alert"></div>' in dom  # the page's own error box stayed empty


def test_run_report_renders_findings_and_charts_in_chromium(tmp_path: Path) -> None:
    code, report, _ = run_report(tmp_path, "--html", str(tmp_path / "run.html"))
    assert code == 0
    dom, console = chromium.load(tmp_path / "run.html")
    _assert_clean(dom, console)
    assert 'data-code="TD102"' in dom and "Data-bound: the loop waits for batches" in dom
    charts = _charts(dom)
    assert set(charts) == {"chart-step-time", "chart-throughput", "chart-memory"}
    for name, chart in charts.items():
        assert 'class="main-svg"' in chart, f"{name} was not drawn"
    steps = len(report["timeline"])
    # One drawn bar per step for each component of the time split (forward, backward, ... when
    # measured; compute is then their sum and not stacked again).
    parts = [key for key, _, _ in step_parts(report["timeline"])]
    assert {"data", "forward", "backward", "optimizer"} <= set(parts)
    assert chart_count(charts["chart-step-time"], '<g class="point">') == len(parts) * steps
    assert "Step time split" in charts["chart-step-time"]
    assert "data wait" in charts["chart-step-time"]  # the legend
    assert 'class="js-line"' in charts["chart-throughput"]


def chart_count(chart: str, needle: str) -> int:
    return len(re.findall(re.escape(needle), chart))


def test_tune_report_renders_the_trials_chart_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "tune.html"
    write_html(render_tune_html(tune_result()), str(page))
    dom, console = chromium.load(page)
    _assert_clean(dom, console)
    chart = _charts(dom)["chart-trials"]
    assert 'class="main-svg"' in chart
    assert chart_count(chart, '<g class="point">') == 2 * 10  # samples/s and data wait per trial
    assert "limit (loader-bound) 590 samples/s" in chart
    assert 'id="trials-table"' in dom and "compute-bound" in dom


def test_resume_report_renders_the_loss_chart_in_chromium(tmp_path: Path) -> None:
    page = tmp_path / "resume.html"
    write_html(render_resume_html(resume_result(exact=False)), str(page))
    dom, console = chromium.load(page)
    _assert_clean(dom, console)
    chart = _charts(dom)["chart-losses"]
    assert 'class="main-svg"' in chart and "first divergent step 8" in chart
    assert "Resume is NOT exact" in dom
