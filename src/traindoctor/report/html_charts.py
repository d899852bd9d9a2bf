"""Plotly figures for the HTML reports (run timeline, tune trials, resume losses).

Each function takes the plain report dictionaries and returns a ``plotly.graph_objects.Figure``
(or ``None`` when there is nothing to draw). Plotly is imported lazily: it is the optional
``traindoctor[html]`` extra, and nothing else in traindoctor needs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: Step-time components in stacking order: (timeline key without ``_ms``, label, colour).
COMPONENTS = (
    ("data", "data wait", "#f59e0b"),
    ("transfer", "host-to-device", "#a855f7"),
    ("forward", "forward", "#3b82f6"),
    ("backward", "backward", "#6366f1"),
    ("compute", "compute", "#3b82f6"),
    ("optimizer", "optimizer step", "#14b8a6"),
    ("sync", "waiting for the GPU (sync)", "#ef4444"),
    ("other", "other host work", "#94a3b8"),
    ("doctor", "watching (the doctor's own work)", "#e2e8f0"),
)
#: The device-time chart's parts per step: (busy/idle, key, label, colour).
GPU_PARTS = (
    ("busy", "transfer", "busy: copies", "#a855f7"),
    ("busy", "forward", "busy: forward", "#3b82f6"),
    ("busy", "backward", "busy: backward", "#6366f1"),
    ("busy", "optimizer", "busy: optimizer step", "#14b8a6"),
    ("busy", "other", "busy: the loop's own kernels", "#16a34a"),
    ("idle", "data", "idle: waiting for the DataLoader", "#f59e0b"),
    ("idle", "host", "idle: host work (Python, launches)", "#94a3b8"),
    ("idle", "sync", "idle: after synchronisations", "#ef4444"),
    ("idle", "transfer", "idle: after blocking copies", "#f472b6"),
)
#: Timeline ``*_ms`` keys that are not parts of the step (totals, or overlapping device time).
_NOT_PARTS = {"wall", "device", "step"}
_EXTRA_COLOURS = ("#64748b", "#ec4899", "#84cc16", "#0ea5e9")
PHASE_COLOURS = {
    "baseline": "#64748b",
    "bound-loader": "#f59e0b",
    "bound-compute": "#3b82f6",
    "search": "#a5b4fc",
    "confirm": "#16a34a",
}
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"


def _go() -> Any:
    import plotly.graph_objects as go

    return go


def _layout(title: str, y_title: str, x_title: str = "optimizer step", height: int = 340) -> dict[str, Any]:
    return {
        "title": {"text": title, "x": 0.01, "xanchor": "left", "y": 0.985, "yanchor": "top", "font": {"size": 15}},
        "height": height,
        "margin": {"l": 64, "r": 20, "t": 66, "b": 48},
        "font": {"family": FONT, "size": 12, "color": "#1f2937"},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "xaxis": {"title": {"text": x_title}, "gridcolor": "#eef0f3", "zeroline": False},
        "yaxis": {"title": {"text": y_title}, "gridcolor": "#eef0f3", "zeroline": False, "rangemode": "tozero"},
        # Legend between the title and the plot, left-aligned: the mode bar keeps the top right.
        "legend": {"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0, "xanchor": "left"},
        "hovermode": "x unified",
    }


def _split(timeline: Sequence[Mapping[str, Any]]) -> bool:
    """Whether forward and backward were timed apart (in some steps at least)."""
    return any("forward_ms" in p and "backward_ms" in p for p in timeline)


def part_ms(point: Mapping[str, Any], key: str, split: bool) -> float:
    """A component's bar height; with forward/backward stacked, ``compute`` only stands for the
    steps where they were not timed apart (it is their sum otherwise)."""
    if split and key == "compute" and "forward_ms" in point:
        return 0.0
    return float(point.get(f"{key}_ms") or 0.0)


def step_parts(timeline: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """The components present in the timeline, known ones first, then any newer ones."""
    keys: list[str] = []
    for point in timeline:
        for key in point:
            if key.endswith("_ms") and key[:-3] not in _NOT_PARTS and key[:-3] not in keys:
                keys.append(key[:-3])
    if _split(timeline) and "compute" in keys and all("forward_ms" in p for p in timeline):
        keys.remove("compute")  # compute = forward + backward: stack the parts, not the sum
    known = [c for c in COMPONENTS if c[0] in keys]
    extra = [k for k in keys if k not in {c[0] for c in COMPONENTS}]
    return known + [(k, k.replace("_", " "), _EXTRA_COLOURS[i % len(_EXTRA_COLOURS)]) for i, k in enumerate(extra)]


def _warmup_shape(fig: Any, timeline: Sequence[Mapping[str, Any]]) -> None:
    warm = [p["step"] for p in timeline if p.get("warmup")]
    if not warm or len(warm) == len(timeline):
        return
    fig.add_vrect(
        x0=0.5,
        x1=max(warm) + 0.5,
        fillcolor="#94a3b8",
        opacity=0.12,
        line_width=0,
        annotation_text="warm-up",
        annotation_position="top left",
        annotation_font_color="#64748b",
    )


def step_time_figure(timeline: Sequence[Mapping[str, Any]]) -> Any | None:
    """Stacked per-step time split: where each step's milliseconds went, over the run."""
    if not timeline:
        return None
    go = _go()
    steps = [p["step"] for p in timeline]
    fig = go.Figure()
    split = _split(timeline)
    for key, label, colour in step_parts(timeline):
        fig.add_trace(
            go.Bar(
                x=steps,
                y=[part_ms(p, key, split) for p in timeline],
                name=label,
                marker={"color": colour, "line": {"width": 0}},
                hovertemplate="%{y:.2f} ms",
            )
        )
    layout = _layout("Step time split", "ms per step")
    layout.update(barmode="stack", bargap=0.08 if len(steps) <= 80 else 0)
    layout["legend"]["traceorder"] = "normal"
    grouped = max(int(p.get("steps", 1)) for p in timeline)
    if grouped > 1:
        layout["xaxis"]["title"]["text"] = f"optimizer step (means over {grouped} steps)"
    fig.update_layout(**layout)
    _warmup_shape(fig, timeline)
    return fig


def throughput_figure(timeline: Sequence[Mapping[str, Any]], steady: float | None) -> Any | None:
    """Samples per second at each step, with the steady-state mean as a dashed line."""
    points = [p for p in timeline if p.get("samples_per_s")]
    if not points:
        return None
    go = _go()
    fig = go.Figure(
        go.Scatter(
            x=[p["step"] for p in points],
            y=[p["samples_per_s"] for p in points],
            mode="lines+markers" if len(points) <= 80 else "lines",
            name="samples/s",
            line={"color": "#2563eb", "width": 2},
            marker={"size": 5},
            hovertemplate="%{y:.1f} samples/s",
        )
    )
    if steady:
        fig.add_trace(
            go.Scatter(
                x=[points[0]["step"], points[-1]["step"]],
                y=[steady, steady],
                mode="lines",
                name=f"steady state {steady:.4g}",
                line={"color": "#16a34a", "dash": "dash"},
                hoverinfo="skip",
            )
        )
    fig.update_layout(**_layout("Throughput", "samples / s"))
    _warmup_shape(fig, timeline)
    return fig


def gpu_figure(gpu: Mapping[str, Any]) -> Any | None:
    """GPU busy time per phase and idle time per host cause, per timed steady step (device
    time, from CUDA events)."""
    steps = list(gpu.get("steps") or [])
    if not steps:
        return None
    go = _go()
    fig = go.Figure()
    x = [s["step"] for s in steps]
    if all("busy" in s and "idle" in s for s in steps):  # per phase and per idle cause
        series = [
            (label, colour, [float((s[group] or {}).get(key) or 0) for s in steps])
            for group, key, label, colour in GPU_PARTS
        ]
        series = [entry for entry in series if any(entry[2])]
    else:
        series = [
            (label, colour, [s.get(key, 0) for s in steps])
            for key, label, colour in (("busy_ms", "GPU busy", "#16a34a"), ("idle_ms", "GPU idle", "#f59e0b"))
        ]
    for label, colour, values in series:
        fig.add_trace(
            go.Bar(
                x=x,
                y=values,
                name=label,
                marker={"color": colour, "line": {"width": 0}},
                hovertemplate="%{y:.3f} ms",
            )
        )
    layout = _layout("GPU busy and idle per step (device time)", "ms per step")
    layout.update(barmode="stack", bargap=0.08 if len(x) <= 80 else 0)
    fig.update_layout(**layout)
    return fig


def memory_figure(timeline: Sequence[Mapping[str, Any]]) -> Any | None:
    """Resident memory (and CUDA allocated memory) at step ends, in MiB."""
    series = [("rss_bytes", "resident (RSS)", "#7c3aed"), ("cuda_allocated_bytes", "CUDA allocated", "#dc2626")]
    go = _go()
    fig = go.Figure()
    for key, label, colour in series:
        points = [p for p in timeline if isinstance(p.get(key), (int, float))]
        if points:
            fig.add_trace(
                go.Scatter(
                    x=[p["step"] for p in points],
                    y=[p[key] / 2**20 for p in points],
                    name=label,
                    mode="lines",
                    line={"color": colour, "width": 2, "shape": "hv"},
                    hovertemplate="%{y:.1f} MiB",
                )
            )
    if not fig.data:
        return None
    fig.update_layout(**_layout("Memory", "MiB"))
    _warmup_shape(fig, timeline)
    return fig


def _short_config(config: Mapping[str, Any]) -> str:
    names = {
        "num_workers": "w",
        "prefetch_factor": "pf",
        "persistent_workers": "pers",
        "pin_memory": "pin",
        "torch_threads": "thr",
    }
    parts = []
    for key, value in config.items():
        short = names.get(key, key)
        if isinstance(value, bool):
            if value:
                parts.append(short)
        elif value is not None:
            parts.append(f"{short}={value}")
    return " ".join(parts) or "default"


def trial_label(index: int, trial: Mapping[str, Any]) -> str:
    """``#3 w=2 pf=4 thr=1``: the trial's number and its configuration in a few characters."""
    return f"#{index} {_short_config(trial.get('config') or {})}"


def tune_figure(result: Mapping[str, Any]) -> Any | None:
    """Each trial's samples/s against the limit, and its data-wait share below it."""
    trials = list(result.get("trials") or [])
    if not trials:
        return None
    go = _go()
    from plotly.subplots import make_subplots

    labels = [trial_label(i + 1, t) for i, t in enumerate(trials)]
    top = _rate_axis_top(result, trials)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.68, 0.32], vertical_spacing=0.06)
    seen: set[str] = set()
    for label, trial in zip(labels, trials):
        phase = str(trial.get("phase") or "search")
        fig.add_trace(
            go.Bar(
                x=[label],
                y=[trial.get("samples_per_s") or 0.0],
                name=phase,
                legendgroup=phase,
                showlegend=phase not in seen,
                marker={"color": PHASE_COLOURS.get(phase, "#94a3b8")},
                hovertemplate="%{y:.1f} samples/s<br>" + _hover_text(str(trial.get("verdict") or "")),
            ),
            row=1,
            col=1,
        )
        seen.add(phase)
    shares = [t.get("data_wait_share") for t in trials]
    fig.add_trace(
        go.Bar(
            x=labels,
            y=[(s or 0.0) * 100 for s in shares],
            name="data wait",
            marker={"color": "#f59e0b"},
            showlegend=False,
            text=["n/a" if s is None else f"{s:.0%}" for s in shares],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="data wait %{text}",
        ),
        row=2,
        col=1,
    )
    # Reference lines span the plot; their names go to the legend (labels on the plot would
    # sit on the bars).
    limit = result.get("limit") or {}
    lines = []
    if isinstance(limit.get("samples_per_s"), (int, float)):
        lines.append(
            (
                float(limit["samples_per_s"]),
                "#dc2626",
                "dash",
                f"limit ({limit.get('bound', '?')}-bound) {limit['samples_per_s']:.4g} samples/s",
            )
        )
    base = _rate(result.get("baseline"))
    if base:
        lines.append((base, "#334155", "dot", f"your script {base:.4g} samples/s"))
    for y, colour, dash, name in lines:
        fig.add_hline(y=y, row=1, col=1, line_dash=dash, line_color=colour, line_width=2)
        fig.add_trace(
            go.Scatter(x=[None], y=[None], mode="lines", name=name, line={"color": colour, "dash": dash, "width": 2}),
            row=1,
            col=1,
        )
    layout = _layout("Trials: samples/s against the limit", "samples / s", x_title="", height=520)
    layout["hovermode"] = "closest"
    layout["margin"]["t"] = 100  # room for a two-row legend under the title
    layout.pop("xaxis")
    layout.pop("yaxis")
    fig.update_layout(**layout)
    fig.update_yaxes(
        title_text="samples / s",
        gridcolor="#eef0f3",
        rangemode="tozero",
        row=1,
        col=1,
        **({"range": [0, top]} if top else {}),
    )
    if top:  # bars cut at the top of the axis carry their value
        for label, trial in zip(labels, trials):
            rate = trial.get("samples_per_s")
            if isinstance(rate, (int, float)) and rate > top:
                fig.add_annotation(
                    x=label,
                    y=top,
                    text=f"{_compact(rate)}&#8593;",
                    showarrow=False,
                    yanchor="top",
                    font={"color": "white", "size": 11},
                    row=1,
                    col=1,
                )
    fig.update_yaxes(title_text="data wait %", gridcolor="#eef0f3", range=[0, 115], row=2, col=1)
    fig.update_xaxes(tickangle=-35, row=2, col=1)
    return fig


def _rate_axis_top(result: Mapping[str, Any], trials: Sequence[Mapping[str, Any]]) -> float | None:
    """Top of the samples/s axis when one bound dwarfs the rest (compute alone on cached
    batches can run 50x faster than any real configuration): 1.3x the largest other rate."""

    def rate(t: Mapping[str, Any]) -> float:
        r = t.get("samples_per_s")
        return float(r) if isinstance(r, (int, float)) and not isinstance(r, bool) else 0.0

    limit = (result.get("limit") or {}).get("samples_per_s")
    # Real configurations (and the limit) set the scale; a bound may run off it.
    reference = max(
        [rate(t) for t in trials if not str(t.get("phase", "")).startswith("bound-")]
        + [float(limit) if isinstance(limit, (int, float)) else 0.0]
    )
    highest = max(rate(t) for t in trials)
    if reference <= 0 or highest <= 3 * reference:
        return None
    return 1.3 * reference


def _compact(value: float) -> str:
    """``44160.7`` -> ``44.2k``: short enough for a bar's width."""
    for size, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.3g}{suffix}"
    return f"{value:.3g}"


def _hover_text(text: str) -> str:
    return text.replace("<", "&lt;").replace(">", "&gt;")[:160]


def _rate(value: Any) -> float | None:
    """samples/s of a ``baseline``/``best`` entry: ``{"samples_per_s": x, ...}`` or a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, Mapping):
        rate = value.get("samples_per_s")
        if isinstance(rate, (int, float)) and not isinstance(rate, bool):
            return float(rate)
    return None


def loss_figure(result: Mapping[str, Any]) -> Any | None:
    """Per-step loss of the uninterrupted, interrupted and resumed runs (verify-resume)."""
    losses = result.get("losses") or {}
    go = _go()
    fig = go.Figure()
    styles = {
        "reference": ("uninterrupted", "#64748b", "solid", 5),
        "interrupted": ("interrupted", "#a855f7", "dot", 7),
        "resumed": ("resumed", "#2563eb", "solid", 7),
    }
    for key, (label, colour, dash, size) in styles.items():
        series = losses.get(key) or {}
        points = sorted((int(s), v) for s, v in series.items() if isinstance(v, (int, float)))
        if points:
            fig.add_trace(
                go.Scatter(
                    x=[s for s, _ in points],
                    y=[v for _, v in points],
                    name=label,
                    mode="lines+markers",
                    line={"color": colour, "dash": dash, "width": 2},
                    marker={"size": size, "symbol": "circle-open" if key == "resumed" else "circle"},
                    hovertemplate="%{y:.6g}",
                )
            )
    if not fig.data:
        return None
    fig.update_layout(**_layout("Loss per step", "loss"))
    fig.update_yaxes(rangemode="normal")
    k = result.get("checkpoint_step")
    if isinstance(k, int):
        fig.add_vline(
            x=k + 0.5,
            line_dash="dash",
            line_color="#475569",
            annotation_text=f"resumed from step {k}",
            annotation_position="top left",
        )
    first = result.get("first_divergent_step")
    if isinstance(first, int) and not result.get("exact"):
        fig.add_vline(
            x=first,
            line_color="#dc2626",
            line_width=2,
            annotation_text=f"first divergent step {first}",
            annotation_position="top right",
            annotation_font_color="#b91c1c",
        )
    return fig
