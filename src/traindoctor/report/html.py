"""Self-contained HTML reports for ``run``, ``tune`` and ``verify-resume``.

One file that works offline: the CSS and the plotly.js bundle are inlined, nothing is fetched.
The page reads top-down as a user asks: *what is the verdict*, *what is wrong and how do I fix
it* (findings grouped by severity, each with its evidence and fix), then *show me* (charts: the
per-step time split over the run, throughput, memory; for ``tune`` each trial's samples/s
against the limit, so the bottleneck is seen to move; for ``verify-resume`` the losses).

The charts use plotly, the optional ``traindoctor[html]`` extra; :func:`missing_dependency`
tells the commands, before any work, that it is absent. Every renderer takes the same plain
dictionary the command's ``--output-format json`` prints, so a saved JSON report can be turned
into a page later.
"""

from __future__ import annotations

import html
import linecache
import os
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from traindoctor.report import html_charts as charts
from traindoctor.report.html_notes import doctor_note, step_spread
from traindoctor.report.html_notes import num as _num
from traindoctor.units import format_bytes

MISSING_PLOTLY = (
    "the HTML report needs plotly, the optional 'html' extra: pip install 'traindoctor[html]' (or pip install plotly)"
)
SEVERITIES = (("error", "Errors"), ("warning", "Warnings"), ("info", "Info"))


class HtmlReportUnavailable(RuntimeError):
    """plotly (the ``html`` extra) is not installed."""


def missing_dependency() -> str | None:
    """``None`` when HTML reports can be written, else the message telling how to enable them."""
    import importlib.util

    try:
        found = importlib.util.find_spec("plotly") is not None
    except (ImportError, ValueError):
        found = False
    return None if found else MISSING_PLOTLY


def _plotly_js() -> str:
    """The plotly.js bundle to inline; raises :class:`HtmlReportUnavailable` without plotly."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError as exc:
        raise HtmlReportUnavailable(MISSING_PLOTLY) from exc
    bundle: str = get_plotlyjs()  # plotly ships no type information
    return bundle


def write_html(text: str, path: str) -> None:
    """Write the page atomically (a half-written report is never left behind)."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------- formatting
def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _bytes(value: Any) -> str:
    """A memory size, up to GiB; ``n/a`` unless it is a positive number."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        return "n/a"
    return format_bytes(value)


def _code(text: str) -> str:
    """Inline code: text between backticks in messages becomes ``<code>``."""
    parts = str(text).split("`")
    return "".join(f"<code>{esc(p)}</code>" if i % 2 else esc(p) for i, p in enumerate(parts))


def _kv_table(rows: Iterable[tuple[str, str]], cls: str = "kv") -> str:
    body = "".join(f"<tr><th>{esc(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="{cls}">{body}</table>' if body else ""


def _tiles(items: Sequence[tuple[str, str, str]]) -> str:
    """Metric tiles: (label, value html, note html)."""
    out = "".join(
        f'<div class="tile"><div class="label">{esc(label)}</div><div class="value">{value}</div>'
        f'<div class="note">{note}</div></div>'
        for label, value, note in items
    )
    return f'<div class="tiles">{out}</div>'


def _figure_html(fig: Any, div_id: str) -> str:
    if fig is None:
        return ""
    import plotly.io as pio

    body = pio.to_html(
        fig,
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True, "modeBarButtonsToRemove": ["select2d", "lasso2d"]},
        default_height=f"{fig.layout.height or 340}px",
    )
    return f'<figure class="chart" data-chart="{esc(div_id)}">{body}</figure>'


# ---------------------------------------------------------------------------------- page
_CSS = """
:root { --fg:#1f2937; --muted:#6b7280; --line:#e5e7eb; --bg:#f6f7f9; --card:#fff;
  --err:#b91c1c; --err-bg:#fef2f2; --warn:#b45309; --warn-bg:#fffbeb; --info:#1d4ed8;
  --info-bg:#eff6ff; --ok:#15803d; --ok-bg:#f0fdf4; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--fg);
  font:14px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif; }
main { max-width:1120px; margin:0 auto; padding:28px 24px 48px; }
header h1 { font-size:20px; margin:0 0 2px; }
header .sub { color:var(--muted); font-size:13px; word-break:break-all; }
h2 { font-size:16px; margin:28px 0 10px; }
code, pre { font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; font-size:12.5px; }
code { background:#f1f3f5; padding:1px 4px; border-radius:4px; }
pre { background:#0f172a; color:#e2e8f0; padding:12px 14px; border-radius:8px; overflow:auto; }
pre code { background:none; padding:0; color:inherit; }
.verdict { margin:18px 0 8px; padding:16px 20px; border-radius:10px; border-left:6px solid;
  background:var(--card); box-shadow:0 1px 2px rgba(0,0,0,.05); }
.verdict .big { font-size:22px; font-weight:650; }
.verdict .why { color:#374151; margin-top:4px; }
.verdict.bad { border-color:var(--err); } .verdict.bad .big { color:var(--err); }
.verdict.warn { border-color:#d97706; } .verdict.warn .big { color:var(--warn); }
.verdict.good { border-color:#16a34a; } .verdict.good .big { color:var(--ok); }
.counts { margin-top:8px; display:flex; gap:8px; flex-wrap:wrap; }
.pill { display:inline-block; padding:1px 10px; border-radius:999px; font-size:12px; font-weight:600; }
.pill.error { background:var(--err-bg); color:var(--err); }
.pill.warning { background:var(--warn-bg); color:var(--warn); }
.pill.info { background:var(--info-bg); color:var(--info); }
.pill.ok { background:var(--ok-bg); color:var(--ok); }
.tiles { display:grid; grid-template-columns:repeat(auto-fit,minmax(170px,1fr)); gap:10px; margin:12px 0; }
.tile { background:var(--card); border:1px solid var(--line); border-radius:10px; padding:10px 14px; }
.tile .label { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.04em; }
.tile .value { font-size:20px; font-weight:650; }
.tile .note { color:var(--muted); font-size:12px; }
.finding { background:var(--card); border:1px solid var(--line); border-left:5px solid;
  border-radius:10px; padding:12px 16px; margin:10px 0; }
.finding.error { border-left-color:var(--err); } .finding.warning { border-left-color:#d97706; }
.finding.info { border-left-color:#2563eb; }
.finding .head { display:flex; gap:10px; align-items:baseline; flex-wrap:wrap; }
.finding .code { font-weight:700; }
.finding .name { color:var(--muted); }
.finding .where { margin-left:auto; color:var(--muted); font-size:12.5px; }
.finding .msg { margin:6px 0; }
.finding .src { margin:6px 0; }
.finding .fix { background:var(--ok-bg); border-radius:8px; padding:8px 12px; margin-top:8px; }
.finding .fix b { color:var(--ok); }
.finding details { margin-top:6px; }
table.kv, table.grid { border-collapse:collapse; font-size:13px; }
table.kv th { text-align:left; font-weight:500; color:var(--muted); padding:2px 16px 2px 0; vertical-align:top; }
table.kv td { padding:2px 0; font-variant-numeric:tabular-nums; }
table.grid { width:100%; background:var(--card); border:1px solid var(--line); border-radius:10px; overflow:hidden; }
table.grid th, table.grid td { padding:6px 10px; border-bottom:1px solid var(--line); text-align:left; }
table.grid th { background:#f9fafb; font-weight:600; font-size:12px; color:#374151; }
table.grid td.num { text-align:right; font-variant-numeric:tabular-nums; }
table.grid tr.best td { background:var(--ok-bg); font-weight:600; }
table.grid td.nowrap { white-space:nowrap; }
.chart { background:var(--card); border:1px solid var(--line); border-radius:10px; margin:10px 0; padding:4px; }
.charts2 { display:grid; grid-template-columns:1fr 1fr; gap:10px; }
.charts2 .chart { margin:0; }
@media (max-width: 900px) { .charts2 { grid-template-columns:1fr; } }
.empty { color:var(--muted); font-style:italic; }
.notes li { color:#374151; }
#td-errors { display:none; background:var(--err-bg); color:var(--err); padding:10px 14px;
  border-radius:8px; margin:10px 0; white-space:pre-wrap; }
footer { color:var(--muted); font-size:12px; margin-top:36px; }
"""

# Script errors (a chart that fails to draw) are shown on the page instead of leaving a blank.
_ERROR_HOOK = """
window.addEventListener('error', function (e) {
  var box = document.getElementById('td-errors');
  if (box) { box.style.display = 'block'; box.textContent += 'A chart failed to render: ' + e.message + '\\n'; }
});
"""


def _page(title: str, subtitle: str, body: str, plotly_js: str) -> str:
    from traindoctor.version import __version__

    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{_CSS}</style>"
        f"<script>{_ERROR_HOOK}</script>"
        f'<script type="text/javascript">{plotly_js}</script></head>'
        f'<body><main><header><h1>{esc(title)}</h1><div class="sub">{subtitle}</div></header>'
        '<div id="td-errors" role="alert"></div>'
        f"{body}"
        f"<footer>Written by traindoctor {esc(__version__)}. Self-contained: works offline.</footer>"
        "</main></body></html>\n"
    )


def _verdict(kind: str, big: str, why: str = "", extra: str = "") -> str:
    why_html = f'<div class="why">{why}</div>' if why else ""
    return f'<section class="verdict {kind}" id="verdict"><div class="big">{big}</div>{why_html}{extra}</section>'


# ---------------------------------------------------------------------------------- findings
def _location(finding: Mapping[str, Any]) -> tuple[str, str]:
    """(``file:row``, the source line) of a finding; empty strings when unknown."""
    filename = str(finding.get("filename") or "")
    row = (finding.get("location") or {}).get("row")
    if not filename:
        return "", ""
    shown = filename
    if not filename.startswith("<"):
        try:
            rel = os.path.relpath(filename)
            shown = filename if rel.startswith("..") else rel
        except ValueError:  # pragma: no cover - other drive on Windows
            pass
    if not row:
        return shown, ""
    return f"{shown}:{row}", statement_text(filename, int(row))


def statement_text(filename: str, row: int, max_lines: int = 6) -> str:
    """The source statement starting at ``row``: continuation lines are added while brackets
    stay open (``loader = DataLoader(`` alone says little), at most ``max_lines``."""

    lines: list[str] = []
    depth = 0
    for offset in range(max_lines):
        line = linecache.getline(filename, row + offset)
        if not line:
            break
        lines.append(line.rstrip())
        code = line.split("#", 1)[0]
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        if depth <= 0:
            break
    return textwrap.dedent("\n".join(lines)).strip("\n")


def _rule_fix(code: str) -> str:
    """The Fix box of a finding that carries no fix of its own (most runtime findings name it in
    their message): the rule's documented "Use instead" example; empty for an unknown code."""
    from traindoctor.registry import get_rule

    rule = get_rule(code) if code else None
    example = textwrap.dedent(getattr(rule, "use_instead", "") or "").strip("\n")
    if not example.strip():
        return ""
    return (
        f'<div class="fix"><b>Fix.</b> As the rule\'s documentation shows:<pre><code>{esc(example)}</code></pre></div>'
    )


def _finding_html(finding: Mapping[str, Any]) -> str:
    from traindoctor.report.run import format_value

    severity = str(finding.get("severity") or "info")
    where, source = _location(finding)
    step = finding.get("step")
    where_html = esc(where) + (f" &middot; step {esc(step)}" if step else "")
    parts = [
        f'<article class="finding {esc(severity)}" data-code="{esc(finding.get("code"))}">',
        f'<div class="head"><span class="pill {esc(severity)}">{esc(severity)}</span>'
        f'<span class="code">{esc(finding.get("code"))}</span>'
        f'<span class="name">{esc(finding.get("name"))}</span>'
        f'<span class="where">{where_html}</span></div>',
        f'<div class="msg">{_code(finding.get("message") or "")}</div>',
    ]
    if source:
        parts.append(f'<pre class="src"><code>{esc(source)}</code></pre>')
    evidence = finding.get("evidence") or {}
    if evidence:
        rows = [(str(k), esc(format_value(v))) for k, v in evidence.items()]
        parts.append(f"<details open><summary>Evidence</summary>{_kv_table(rows)}</details>")
    fix = finding.get("fix") or {}
    help_text = finding.get("help")
    if help_text or fix:
        fix_html = f"<b>Fix.</b> {_code(help_text or fix.get('message') or '')}"
        edits = fix.get("edits") or []
        if edits:
            shown = "\n".join(str(e.get("content", "")) for e in edits if e.get("content"))
            if shown.strip():
                fix_html += f"<pre><code>{esc(shown)}</code></pre>"
        parts.append(f'<div class="fix">{fix_html}</div>')
    else:
        parts.append(_rule_fix(str(finding.get("code") or "")))
    if finding.get("url"):
        parts.append(
            f'<div class="note"><a href="{esc(finding["url"])}">rule {esc(finding.get("code"))} documentation</a></div>'
        )
    parts.append("</article>")
    return "".join(parts)


def findings_section(findings: Sequence[Mapping[str, Any]]) -> str:
    """Findings grouped by severity (errors first), each with evidence and fix."""
    if not findings:
        return '<h2>Findings</h2><p class="empty" id="no-findings">No findings: nothing to fix.</p>'
    out = ['<section id="findings">']
    for severity, title in SEVERITIES:
        group = [f for f in findings if f.get("severity") == severity]
        if group:
            out.append(f"<h2>{title} ({len(group)})</h2>")
            out.extend(_finding_html(f) for f in group)
    other = [f for f in findings if f.get("severity") not in {s for s, _ in SEVERITIES}]
    if other:
        out.append(f"<h2>Other ({len(other)})</h2>")
        out.extend(_finding_html(f) for f in other)
    out.append("</section>")
    return "".join(out)


def _counts(findings: Sequence[Mapping[str, Any]]) -> str:
    pills = []
    for severity, _ in SEVERITIES:
        n = sum(1 for f in findings if f.get("severity") == severity)
        if n:
            pills.append(f'<span class="pill {severity}">{n} {severity}{"s" if n != 1 else ""}</span>')
    if not pills:
        pills.append('<span class="pill ok">no findings</span>')
    return f'<div class="counts">{"".join(pills)}</div>'


def _notes(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    items = "".join(f"<li>{_code(n)}</li>" for n in notes)
    return f'<h2>Notes</h2><ul class="notes">{items}</ul>'


# ---------------------------------------------------------------------------------- run
_VERDICT_HEADLINES = {
    "data-bound": "Data-bound: the loop waits for batches",
    "transfer-bound": "Transfer-bound: host-to-device copies dominate",
    "compute-bound": "Compute-bound: the model is the bottleneck",
    "memory-bound": "Memory-bound: peak memory is near capacity",
    "host-bound": "Host-bound: the GPU waits for the host to queue work",
    "sync-bound": "Sync-bound: the GPU idles after host-device synchronisations",
}


def render_run_html(report: Mapping[str, Any]) -> str:
    """The page for ``traindoctor run``'s report dictionary (its ``--output-format json``)."""
    plotly_js = _plotly_js()
    findings = list(report.get("findings") or [])
    profile = report.get("profile") or {}
    env = report.get("environment") or {}
    timeline = list(report.get("timeline") or [])
    verdict = str(profile.get("verdict") or "unknown")
    worst = next((s for s, _ in SEVERITIES if any(f.get("severity") == s for f in findings)), None)
    kind = {"error": "bad", "warning": "warn"}.get(worst or "", "good")
    if verdict == "memory-bound" and kind == "good":
        kind = "warn"
    big = _VERDICT_HEADLINES.get(verdict, f"Verdict: {verdict}")
    if report.get("partial"):
        big += " (partial report: the run was interrupted)"
    body = [_verdict(kind, esc(big), _code(profile.get("reason") or ""), _counts(findings))]

    per = profile.get("per_step_ms") or {}
    shares = profile.get("shares") or {}
    memory = profile.get("memory") or {}
    peak = memory.get("cuda_allocated_peak_bytes") or memory.get("rss_peak_bytes")
    peak_what = "CUDA allocated" if memory.get("cuda_allocated_peak_bytes") else "resident (RSS)"
    body.append(
        _tiles(
            [
                (
                    "Throughput",
                    _num(profile.get("samples_per_s"), digits=4) + " <small>samples/s</small>",
                    "steady state",
                ),
                ("Step time", _num(per.get("step"), " ms"), f"median {_num(per.get('median_step'), ' ms')}"),
                (
                    "Data wait",
                    _num((shares.get("data") or 0) * 100, "%", 3),
                    f"{_num(per.get('data_wait'), ' ms')} per step",
                ),
                ("Peak memory", _bytes(peak), peak_what),
                (
                    "Steps",
                    _num(profile.get("steps"), digits=9),
                    f"{_num(profile.get('warmup_steps'), digits=9)} warm-up, {_num(profile.get('steady_steps'), digits=9)} steady",
                ),
            ]
        )
    )
    body.append(findings_section(findings))
    body.append("<h2>Where the time goes</h2>")
    if timeline:
        body.append(_figure_html(charts.step_time_figure(timeline), "chart-step-time"))
        body.append('<div class="charts2">')
        body.append(_figure_html(charts.throughput_figure(timeline, profile.get("samples_per_s")), "chart-throughput"))
        body.append(_figure_html(charts.memory_figure(timeline), "chart-memory"))
        body.append("</div>")
    else:
        body.append('<p class="empty">No optimizer step was observed, so there is no per-step timeline.</p>')
    gpu = profile.get("gpu")
    if gpu:
        body.append(_figure_html(charts.gpu_figure(gpu), "chart-gpu"))
    body.append(_profile_table(per, shares, gpu))
    body.append(_throughput_table(profile))
    body.append(_notes(list(report.get("notes") or [])))
    body.append(_environment(env))
    command = " ".join(str(c) for c in env.get("command") or [])
    subtitle = esc(f"traindoctor run {command}".strip())
    return _page("traindoctor run report", subtitle, "".join(body), plotly_js)


def _throughput_table(profile: Mapping[str, Any]) -> str:
    """Samples/s, tokens/s, the counted step's FLOPs and MFU (empty when nothing was measured)."""
    if not profile.get("samples_per_s"):
        return ""
    tp = profile.get("throughput") or {}
    rows = [("samples/s (steady state)", _num(profile.get("samples_per_s"), digits=6))]
    if profile.get("tokens_per_s"):
        rows.append(
            (
                "tokens/s (token ids; padding left out when the batch has its attention mask)",
                _num(profile["tokens_per_s"], digits=9),
            )
        )
    if tp.get("flops_per_step"):
        rows.append(
            (
                f"FLOPs per step (counted on step {esc(tp.get('flops_step'))}, FlopCounterMode)",
                f"{tp['flops_per_step']:.4g}",
            )
        )
        if tp.get("flops_per_sample"):
            rows.append(("FLOPs per sample", f"{tp['flops_per_sample']:.4g}"))
        by = tp.get("flops_by_precision") or {}
        if by:
            rows.append(("by precision", esc(", ".join(f"{k} {v:.4g}" for k, v in sorted(by.items())))))
        if tp.get("mfu") is not None:
            peaks = tp.get("peak_tflops") or {}
            peak_text = ", ".join(f"{k} {v:g}" for k, v in peaks.items())
            rows.append(
                ("MFU (model FLOP/s over the device's peak; unvalidated on hardware)", _num(tp["mfu"] * 100, "%", 3))
            )
            rows.append((f"peak TFLOP/s of the {esc(tp.get('peak_device'))}", esc(peak_text)))
        elif tp.get("mfu_note"):
            rows.append(("MFU", esc(tp["mfu_note"])))
    body = "".join(f"<tr><td>{label}</td><td class=num>{value}</td></tr>" for label, value in rows)
    return f'<h2>Throughput</h2><table class="grid" id="throughput-table" style="width:auto">{body}</table>'


def _gpu_table(gpu: Mapping[str, Any]) -> str:
    """Device time per steady step: busy per phase, idle per host cause."""
    per = gpu.get("per_step_ms") or {}
    span = per.get("gpu_step") or 0
    rows = []
    for group, labels in (
        (
            "busy",
            (
                ("transfer", "copies"),
                ("forward", "forward"),
                ("backward", "backward"),
                ("optimizer", "optimizer step"),
                ("other", "loop's own kernels"),
            ),
        ),
        (
            "idle",
            (
                ("data", "waiting for the DataLoader"),
                ("host", "host work (Python, launches)"),
                ("sync", "after synchronisations"),
                ("transfer", "after blocking copies"),
            ),
        ),
    ):
        values = per.get(group) or {}
        for key, label in labels:
            value = values.get(key) or 0
            share = f"{value / span:.0%}" if span else ""
            rows.append(
                f"<tr><td>GPU {group}: {label}</td><td class=num>{_num(value, ' ms')}</td><td class=num>{share}</td></tr>"
            )
    rows.append(f"<tr><th>GPU step (mean)</th><th class=num>{_num(span, ' ms')}</th><th></th></tr>")
    where = f"{esc(gpu.get('platform', 'CUDA'))} events on device {esc(gpu.get('device_index'))}"
    return (
        f"<h2>Device time per step ({where}, {_num(gpu.get('steady_timed_steps'), digits=9)} steady steps)</h2>"
        '<table class="grid" id="gpu-table" style="width:auto"><tr><th>component</th><th>per step</th><th>share</th></tr>'
        + "".join(rows)
        + "</table>"
    )


def _profile_rows(per: Mapping[str, Any], gpu: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(per_step_ms key, label) of the rows that were measured, each once: forward, backward and
    other host work when the forward was timed, else their sum as compute; no copy row on a run
    that copied nothing to a device (a CPU run)."""
    keys: list[tuple[str, str]] = []
    if per.get("data_wait") is not None:
        keys.append(("data_wait", "data wait"))
    if per.get("transfer") or gpu:
        keys.append(("transfer", "host-to-device"))
    if per.get("forward") is not None:
        keys += [("forward", "forward"), ("backward", "backward")]
    else:
        keys.append(("compute", "compute"))
    if per.get("optimizer") is not None:
        keys.append(("optimizer", "optimizer step"))
    if per.get("other") is not None:
        keys.append(("other", "other host work"))
    return keys


def _profile_table(per: Mapping[str, Any], shares: Mapping[str, Any], gpu: Mapping[str, Any] | None = None) -> str:
    if not per:
        return ""
    step = per.get("step") or 0
    rows = []
    for key, label in _profile_rows(per, gpu):
        value = per.get(key)
        share = f"{value / step:.0%}" if isinstance(value, (int, float)) and step else ""
        rows.append(f"<tr><td>{label}</td><td class=num>{_num(value, ' ms')}</td><td class=num>{share}</td></tr>")
    known = {"data_wait", "transfer", "compute", "forward", "backward", "optimizer", "other"}
    known |= {"step", "median_step", "p90_step", "device", "doctor"}
    for key, value in per.items():  # components added later (e.g. a sync wait)
        if key not in known and isinstance(value, (int, float)):
            share = f"{value / step:.0%}" if step else ""
            rows.append(
                f"<tr><td>{esc(key.replace('_', ' '))}</td><td class=num>{_num(value, ' ms')}</td><td class=num>{share}</td></tr>"
            )
    rows.append(f"<tr><th>step (mean)</th><th class=num>{_num(step, ' ms')}</th><th></th></tr>")
    title = "Steady-state step (means)"
    spread = step_spread(per)
    if gpu:
        title += ", host time: on a GPU forward, backward and optimizer are kernel launches"
    return (
        f'<h2>{title}</h2><table class="grid" id="profile-table" style="width:auto">'
        "<tr><th>component</th><th>per step</th><th>share</th></tr>"
        + "".join(rows)
        + "</table>"
        + doctor_note(per)
        + spread
        + (_gpu_table(gpu) if gpu else "")
    )


def _environment(env: Mapping[str, Any]) -> str:
    if not env:
        return ""
    device = env.get("device") or {}
    rows = [
        ("device", esc(" ".join(str(x) for x in (device.get("type"), device.get("name")) if x))),
        ("torch", esc(env.get("torch"))),
        ("python", esc(env.get("python"))),
        ("cores (usable / machine)", f"{esc(env.get('cpu_count'))} / {esc(env.get('machine_cores'))}"),
        ("world size", esc(env.get("world_size"))),
        ("exit code", esc(env.get("exit_code"))),
        ("platform", esc(env.get("platform"))),
    ]
    rows = [(k, v) for k, v in rows if v and v != "None"]
    return f"<h2>Environment</h2>{_kv_table(rows)}"


# ---------------------------------------------------------------------------------- tune
def _config_snippet(recommended: Mapping[str, Any]) -> str:
    loader = {k: v for k, v in recommended.items() if k != "torch_threads"}
    args = ", ".join(f"{k}={v!r}" for k, v in loader.items())
    lines = [f"DataLoader(dataset, batch_size=..., {args})" if args else "DataLoader(dataset, ...)"]
    if recommended.get("torch_threads") is not None:
        lines.insert(0, f"torch.set_num_threads({recommended['torch_threads']!r})")
    return "\n".join(lines)


def render_tune_html(result: Mapping[str, Any]) -> str:
    """The page for ``traindoctor tune SCRIPT``'s result (its ``--output-format json``)."""
    plotly_js = _plotly_js()
    trials = list(result.get("trials") or [])
    base = charts._rate(result.get("baseline"))
    best = charts._rate(result.get("best"))
    speedup = result.get("speedup")
    limit = result.get("limit") or {}
    before, after = result.get("bottleneck_before"), result.get("bottleneck_after")
    if isinstance(speedup, (int, float)) and speedup >= 1.05:
        kind, big = "good", f"{speedup:.2f}x faster with the recommended settings"
    elif isinstance(speedup, (int, float)):
        kind, big = "warn", f"Your settings are already close to the best ({speedup:.2f}x)"
    else:
        kind, big = "warn", "No speed-up measured"
    why = ""
    if before or after:
        why = f"Bottleneck: <b>{esc(before or '?')}</b> &rarr; <b>{esc(after or '?')}</b>"
    body = [_verdict(kind, esc(big), why)]
    lim = limit.get("samples_per_s")
    # never above 100%, as tune says it: a best beyond the limit was measured under other load
    reached = f"{min(best / lim, 1.0):.0%} of the limit" if best and isinstance(lim, (int, float)) and lim else ""
    body.append(
        _tiles(
            [
                ("Your script", _num(base) + " <small>samples/s</small>", "baseline configuration"),
                ("Recommended", _num(best) + " <small>samples/s</small>", reached),
                ("Limit", _num(lim) + " <small>samples/s</small>", f"{esc(limit.get('bound', '?'))}-bound"),
                (
                    "Trials",
                    str(len(trials)),
                    esc(f"{sum(1 for t in trials if t.get('phase') == 'confirm')} confirmation runs"),
                ),
            ]
        )
    )
    if limit.get("detail"):
        body.append(f'<p class="limit-detail">{_code(limit["detail"])}</p>')
    recommended = result.get("recommended") or {}
    if recommended:
        body.append("<h2>Recommended settings</h2>")
        body.append(f'<pre id="snippet"><code>{esc(_config_snippet(recommended))}</code></pre>')
    body.append("<h2>Trials</h2>")
    body.append(_figure_html(charts.tune_figure(result), "chart-trials"))
    body.append(_trials_table(trials, result.get("best")))
    if result.get("findings"):
        body.append(findings_section(list(result["findings"])))
    body.append(_notes(list(result.get("notes") or [])))
    script = result.get("script") or ""
    subtitle = esc(f"traindoctor tune {script}".strip())
    return _page("traindoctor tune report", subtitle, "".join(body), plotly_js)


def _trials_table(trials: Sequence[Mapping[str, Any]], best: Any) -> str:
    if not trials:
        return '<p class="empty">No trial ran.</p>'
    best_cfg = best.get("config") if isinstance(best, Mapping) else None
    keys: list[str] = []
    for t in trials:
        for k in t.get("config") or {}:
            if k not in keys:
                keys.append(k)
    head = "".join(f"<th>{esc(k)}</th>" for k in keys)
    rows = []
    for i, t in enumerate(trials, 1):
        cfg = t.get("config") or {}
        cls = ' class="best"' if best_cfg is not None and cfg == best_cfg and t.get("phase") == "confirm" else ""
        cells = "".join(f"<td>{esc(cfg.get(k, ''))}</td>" for k in keys)
        share = t.get("data_wait_share")
        rows.append(
            f"<tr{cls}><td class=num>{i}</td><td class=nowrap>{esc(t.get('phase'))}</td>{cells}"
            f"<td class=num>{_num(t.get('samples_per_s'))}</td>"
            f"<td class=num>{'n/a' if share is None else f'{share:.0%}'}</td>"
            f"<td>{_code(t.get('verdict') or '')}</td></tr>"
        )
    return (
        f'<table class="grid" id="trials-table"><tr><th>#</th><th>phase</th>{head}'
        "<th>samples/s</th><th>data wait</th><th>verdict</th></tr>" + "".join(rows) + "</table>"
    )


# ---------------------------------------------------------------------------------- resume
def render_resume_html(result: Mapping[str, Any]) -> str:
    """The page for ``traindoctor verify-resume``'s result (its ``--output-format json``)."""
    plotly_js = _plotly_js()
    exact = bool(result.get("exact"))
    if result.get("error"):
        body = [_verdict("bad", "Could not verify resume", _code(result["error"]))]
        if result.get("log_tail"):
            body.append(f"<h2>Last lines of the run's output</h2><pre><code>{esc(result['log_tail'])}</code></pre>")
    else:
        why = _code(result.get("summary") or "")
        body = [_verdict("good" if exact else "bad", "Resume is exact" if exact else "Resume is NOT exact", why)]
        body.append(
            _tiles(
                [
                    ("Steps", _num(result.get("steps"), digits=9), "per run"),
                    ("Checkpoint", _num(result.get("checkpoint_step"), digits=9), "resumed after this step"),
                    (
                        "First divergent step",
                        "none" if exact else _num(result.get("first_divergent_step"), digits=9),
                        "",
                    ),
                    (
                        "Tolerance",
                        "bitwise" if not result.get("tolerance") else _num(result.get("tolerance")),
                        "relative",
                    ),
                ]
            )
        )
        if result.get("cause"):
            detail = f"<p>{_code(result.get('explanation') or '')}</p>" if result.get("explanation") else ""
            body.append(
                f'<h2>Cause</h2><article class="finding error" id="cause"><div class="msg"><b>{_code(result["cause"])}</b></div>{detail}</article>'
            )
        also = list(result.get("also") or [])
        if also:
            items = "".join(f"<li>{_code(a)}</li>" for a in also)
            body.append(f'<h2>Also differs</h2><ul class="notes">{items}</ul>')
        body.append("<h2>Losses</h2>")
        fig = charts.loss_figure(result)
        body.append(
            _figure_html(fig, "chart-losses")
            if fig is not None
            else '<p class="empty">No per-step losses were recorded.</p>'
        )
        body.append(_notes(list(result.get("notes") or [])))
    script = result.get("script") or ""
    subtitle = esc(f"traindoctor verify-resume {script}".strip())
    return _page("traindoctor verify-resume report", subtitle, "".join(body), plotly_js)


# ---------------------------------------------------------------------------------- saved JSON
def render_saved(data: Mapping[str, Any]) -> str:
    """The page for a saved JSON result of ``run``, ``tune`` or ``verify-resume`` (told apart by
    their keys: tune's ``trials``, verify-resume's ``exact``, else a run report)."""
    if "trials" in data:
        return render_tune_html(data)
    if "exact" in data:
        return render_resume_html(data)
    return render_run_html(data)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m traindoctor.report.html RESULT.json OUT.html``: a page from a saved result."""
    import json
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] in ("-h", "--help"):
        sys.stderr.write(
            "usage: python -m traindoctor.report.html RESULT.json OUT.html\n"
            "  RESULT.json: the --output-format json output of traindoctor run, "
            "tune or verify-resume\n"
        )
        return 0 if args[:1] in (["-h"], ["--help"]) else 2
    problem = missing_dependency()
    if problem:
        sys.stderr.write(f"traindoctor: {problem}\n")
        return 2
    try:
        with open(args[0], encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"traindoctor: cannot read {args[0]}: {exc}\n")
        return 2
    if not isinstance(data, dict):
        sys.stderr.write(f"traindoctor: {args[0]} is not a traindoctor JSON result\n")
        return 2
    write_html(render_saved(data), args[1])
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
