"""HTML reports as text: content, offline self-containment, CLI wiring, the missing-extra message.

The browser checks (the page runs without console errors and draws its charts) are in
``test_html_browser.py``.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("plotly", reason="the html extra (plotly) is not installed: pip install 'traindoctor[html]'")

from html_fixtures import resume_result, run_report, tune_result

from traindoctor.report import html as html_report
from traindoctor.report.html import render_resume_html, render_run_html, render_tune_html


def _figures(page: str) -> dict[str, dict]:
    """The plotly figures of a page by div id: (data, layout) as plotly.io.to_html embedded them."""
    out = {}
    for div_id, data, layout in re.findall(
        r'Plotly\.newPlot\(\s*"([^"]+)",\s*(\[.*?\]),\s*(\{.*?\}),\s*\{"displaylogo"', page, re.S
    ):
        out[div_id] = {"data": json.loads(data), "layout": json.loads(layout)}
    return out


def _assert_offline(page: str) -> None:
    # No external script, stylesheet, image or font: everything is inlined.
    assert not re.search(r"<script[^>]+src=", page)
    assert not re.search(r"<link[^>]+href=", page)
    assert not re.search(r'<img[^>]+src="(?!data:)', page)
    assert not re.search(r'url\(\s*["\']?https?:', page)
    assert "cdn.plot.ly" not in page.split("</head>", 1)[1]


@pytest.fixture(scope="module")
def run_page(tmp_path_factory) -> tuple[str, dict]:
    folder = tmp_path_factory.mktemp("run")
    code, report, _ = run_report(folder, "--html", str(folder / "report.html"))
    assert code == 0
    return (folder / "report.html").read_text(encoding="utf-8"), report


def test_run_page_leads_with_the_verdict_then_findings_then_charts(run_page) -> None:
    page, report = run_page
    assert report["profile"]["verdict"] == "data-bound"
    body = page.split("<body>", 1)[1]
    verdict = body.index('id="verdict"')
    finding = body.index('data-code="TD102"')
    chart = body.index('data-chart="chart-step-time"')
    assert verdict < finding < chart
    assert "Data-bound: the loop waits for batches" in body
    assert "1 warning" in body
    assert "<h2>Warnings (1)</h2>" in body
    # Evidence and fix of the finding, and the source line it points at.
    assert "data_wait_share" in body and "recommended_num_workers" in body
    assert "<b>Fix.</b> Pass <code>num_workers=" in body
    assert "slow_train.py:15 &middot; step" in body and "loader = DataLoader(Slow(), batch_size=4)" in body
    _assert_offline(page)


def test_run_page_charts_hold_the_per_step_series(run_page) -> None:
    page, report = run_page
    figures = _figures(page)
    assert set(figures) == {"chart-step-time", "chart-throughput", "chart-memory"}
    split = figures["chart-step-time"]["data"]
    names = [t["name"] for t in split]
    # forward and backward timed apart; `compute` (their sum) only for steps where they were not
    assert [n for n in names if n != "compute"] == [
        "data wait",
        "host-to-device",
        "forward",
        "backward",
        "optimizer step",
        "other host work",
        "watching (the doctor's own work)",
    ]
    steps = len(report["timeline"])
    assert steps == 16 and all(len(t["y"]) == steps for t in split)
    # The stacked bars add up to each step's wall time (the doctor's own work a part of its own).
    for i, point in enumerate(report["timeline"]):
        assert sum(t["y"][i] for t in split) == pytest.approx(point["wall_ms"], rel=1e-3, abs=0.01)
    data_wait = split[0]["y"]
    assert min(data_wait[2:]) >= 4 * 2.0 * 0.9  # 4 samples x 2 ms sleep, in the main process
    throughput = figures["chart-throughput"]["data"]
    assert throughput[0]["y"] == [p["samples_per_s"] for p in report["timeline"]]
    assert throughput[1]["y"][0] == report["profile"]["samples_per_s"]
    assert figures["chart-memory"]["data"][0]["name"] == "resident (RSS)"


def test_run_page_without_steps_or_findings_says_so() -> None:
    page = render_run_html(
        {
            "findings": [],
            "profile": {"verdict": "unknown"},
            "timeline": [],
            "environment": {},
            "notes": ["nested watch ignored"],
        }
    )
    assert 'id="no-findings"' in page and "no per-step timeline" in page
    assert "nested watch ignored" in page
    assert _figures(page) == {}


def test_user_text_is_escaped() -> None:
    finding = {
        "code": "TD102",
        "name": "x",
        "severity": "error",
        "message": "<script>alert(1)</script> and `a<b`",
        "evidence": {"k": "<i>"},
        "filename": "",
        "location": None,
    }
    page = render_run_html({"findings": [finding], "profile": {}, "environment": {}})
    body = page.split("<body>", 1)[1]
    assert "<script>alert(1)" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<code>a&lt;b</code>" in body and "&lt;i&gt;" in body
    assert "<h2>Errors (1)</h2>" in body


def test_tune_page_shows_trials_against_the_limit_and_the_bottleneck_move() -> None:
    page = render_tune_html(tune_result())
    body = page.split("<body>", 1)[1]
    assert "1.91x faster with the recommended settings" in body
    assert "<b>data-bound (main process)</b> &rarr; <b>compute-bound</b>" in body
    assert "97% of the limit" in body  # 575 of 590 samples/s
    beyond = tune_result()
    beyond["best"]["samples_per_s"] = 650.0  # beyond the limit: measured under other load
    assert "100% of the limit" in render_tune_html(beyond) and "110% of the limit" not in render_tune_html(beyond)
    assert "torch.set_num_threads(1)" in body
    assert "num_workers=2, prefetch_factor=2, persistent_workers=True" in body
    fig = _figures(page)["chart-trials"]
    rates = [t for t in fig["data"] if t["type"] == "bar" and t.get("name") != "data wait"]
    names = [t.get("name") for t in fig["data"]]
    assert "limit (loader-bound) 590 samples/s" in names and "your script 301 samples/s" in names
    assert len(rates) == 10 and rates[0]["x"] == ["#1 w=0 thr=2"]
    assert [t["name"] for t in rates[:4]] == ["baseline", "bound-loader", "bound-loader", "bound-compute"]
    wait = next(t for t in fig["data"] if t.get("name") == "data wait")
    assert wait["text"][0] == "90%" and wait["text"][1] == "n/a" and wait["text"][8] == "4%"
    shapes = fig["layout"]["shapes"]
    assert any(s.get("y0") == 590.0 for s in shapes)  # the limit line
    assert any(s.get("y0") == 301.0 for s in shapes)  # the script's own rate
    assert "range" not in fig["layout"]["yaxis"]  # no bound runs off the scale here
    # The confirmed best configuration is highlighted in the table.
    assert len(re.findall(r'<tr class="best">', body)) == 1
    _assert_offline(page)


def test_resume_page_marks_the_resume_point_and_the_first_divergent_step() -> None:
    page = render_resume_html(resume_result(exact=False))
    body = page.split("<body>", 1)[1]
    assert "Resume is NOT exact" in body and 'id="cause"' in body
    assert "optimizer state lost" in body
    fig = _figures(page)["chart-losses"]
    assert [t["name"] for t in fig["data"]] == ["uninterrupted", "interrupted", "resumed"]
    assert fig["data"][2]["x"] == [7, 8, 9, 10]
    notes = [a["text"] for a in fig["layout"]["annotations"]]
    assert "resumed from step 6" in notes and "first divergent step 8" in notes
    exact = render_resume_html(resume_result(exact=True))
    assert "Resume is exact" in exact and "first divergent step" not in exact.split("<body>")[1]
    failed = render_resume_html({"exact": False, "error": "script not found: x.py", "log_tail": "boom"})
    assert "Could not verify resume" in failed and "boom" in failed


def test_missing_plotly_is_a_clear_message_before_the_run(tmp_path, monkeypatch, capsys) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "plotly" else real(name, *a))
    assert html_report.missing_dependency() == html_report.MISSING_PLOTLY
    from traindoctor.doctor.cli import main

    script = tmp_path / "never_run.py"
    script.write_text("open(__file__ + '.ran', 'w').close()\n")
    assert main(["--html", str(tmp_path / "r.html"), str(script)]) == 2
    err = capsys.readouterr().err
    assert "pip install 'traindoctor[html]'" in err and "Traceback" not in err
    assert not (tmp_path / "never_run.py.ran").exists() and not (tmp_path / "r.html").exists()

    from traindoctor.resume.cli import main as verify

    assert verify([str(script), "--resume-args", "--resume", "--html", str(tmp_path / "v.html")]) == 2
    assert "pip install 'traindoctor[html]'" in capsys.readouterr().err


def test_verify_resume_writes_its_html_report(tmp_path, capsys) -> None:
    from traindoctor.resume.cli import main as verify

    scripts = Path(__file__).parents[1] / "resume" / "scripts"
    out = tmp_path / "resume.html"
    code = verify(
        [
            str(scripts / "model_only.py"),
            "--resume-args",
            "--resume",
            "--steps",
            "9",
            "--interrupt-at",
            "4",
            "--output-format",
            "json",
            "--html",
            str(out),
        ]
    )
    result = json.loads(capsys.readouterr().out)
    assert code == 1 and result["first_divergent_step"] == 8
    # The JSON now carries the three runs' per-step losses, which the page draws.
    assert sorted(result["losses"]) == ["interrupted", "reference", "resumed"]
    assert sorted(map(int, result["losses"]["reference"])) == list(range(1, 10))
    assert sorted(map(int, result["losses"]["resumed"])) == [7, 8, 9]
    assert result["losses"]["resumed"]["7"] == result["losses"]["reference"]["7"]
    assert result["losses"]["resumed"]["8"] != result["losses"]["reference"]["8"]
    page = out.read_text(encoding="utf-8")
    assert "Resume is NOT exact" in page and "first divergent step 8" in page
    assert _figures(page)["chart-losses"]["data"][2]["x"] == [7, 8, 9]


def test_a_saved_json_result_becomes_a_page(tmp_path, run_page, capsys) -> None:
    _, report = run_page
    for name, data, marker in (
        ("run", report, "traindoctor run report"),
        ("tune", tune_result(), "traindoctor tune report"),
        ("resume", resume_result(), "traindoctor verify-resume report"),
    ):
        saved = tmp_path / f"{name}.json"
        saved.write_text(json.dumps(data))
        assert html_report.main([str(saved), str(tmp_path / f"{name}.html")]) == 0
        assert f"<title>{marker}</title>" in (tmp_path / f"{name}.html").read_text(encoding="utf-8")
    (tmp_path / "bad.json").write_text("[1, 2")
    assert html_report.main([str(tmp_path / "bad.json"), str(tmp_path / "bad.html")]) == 2
    assert "cannot read" in capsys.readouterr().err and not (tmp_path / "bad.html").exists()


def test_rendering_without_plotly_raises_the_clear_message(monkeypatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_plotly(name, *args, **kwargs):
        if name == "plotly" or name.startswith("plotly."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_plotly)
    with pytest.raises(html_report.HtmlReportUnavailable, match=r"pip install 'traindoctor\[html\]'"):
        render_tune_html(tune_result())


def test_a_bound_far_above_every_real_configuration_runs_off_the_scale_with_its_value() -> None:
    result = tune_result()
    result["trials"][3]["samples_per_s"] = 44160.7  # compute alone on cached batches
    fig = _figures(render_tune_html(result))["chart-trials"]
    assert fig["layout"]["yaxis"]["range"] == [0, pytest.approx(1.3 * 590.0)]  # the limit sets it
    clipped = [a for a in fig["layout"]["annotations"] if "&#8593;" in a["text"]]
    assert [(a["x"], a["text"]) for a in clipped] == [
        ("#4 w=0 thr=1", "44.2k&#8593;"),
        ("#5 w=0 thr=2", "1.39k&#8593;"),
    ]
