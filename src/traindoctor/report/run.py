"""Rendering the runtime report: JSON (machine) and text (findings, then a compact profile).

Both render the same report dictionary (``Session.report_dict()``, or the merged report of a
distributed run): ``{"findings": [Finding.to_dict(), ...], "profile": {...}, "environment":
{...}, "notes": [...], "partial": bool}``. Findings print like the static checker's
(``path:row: TD102 message``) followed by their evidence, one ``key: value`` per line.
"""

from __future__ import annotations

import json
import linecache
import os
from collections.abc import Mapping
from typing import Any

from traindoctor.runtime.profile import DOCTOR_SHARE_NOTED
from traindoctor.units import format_bytes

#: The profile table's rows in display order: (per_step_ms key, label).
_ROWS = (
    ("data_wait", "data wait (DataLoader next())"),
    ("transfer", "host-to-device copies"),
    ("forward", "forward"),
    ("backward", "backward"),
    ("optimizer", "optimizer step"),
    ("sync", "waiting for the GPU (sync: .item(), .cpu(), ...)"),
    ("other", "other host work (data preparation, logging, ...)"),
)
_LABEL_WIDTH = 50


def render_json(report: Mapping[str, Any]) -> str:
    """The report as indented JSON (keys in a fixed order, findings sorted)."""
    return json.dumps(report, indent=2, default=str) + "\n"


def _relpath(path: str) -> str:
    if not path or path.startswith("<"):
        return path
    try:
        rel = os.path.relpath(path)
    except ValueError:  # pragma: no cover - other drive on Windows
        return path
    return path if rel.startswith("..") else rel


def format_value(value: Any) -> str:
    """Evidence values: 4 significant digits for floats, inline ``k=v`` for small mappings."""
    if isinstance(value, bool) or value is None:
        return str(value).lower() if isinstance(value, bool) else "null"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={format_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    return str(value)


def _finding_lines(finding: Mapping[str, Any]) -> list[str]:
    loc = finding.get("location") or {}
    filename = finding.get("filename") or ""
    row = loc.get("row")
    where = _relpath(filename)
    if where and row:
        where = f"{where}:{row}:{loc.get('column', 1)}:"
    elif where:
        where = f"{where}:"
    step = finding.get("step")
    at_step = f" (step {step})" if step else ""
    lines = [f"{where} {finding['code']} {finding['message']}{at_step}".lstrip()]
    if filename and row:
        source = linecache.getline(filename, row).rstrip()
        if source:
            lines.append(f" {row} | {source}")
    evidence = finding.get("evidence") or {}
    per_rank = evidence.get("per_rank") if isinstance(evidence, Mapping) else None
    shown = [(k, v) for k, v in evidence.items() if k != "per_rank"]
    if shown or per_rank:
        lines.append("  evidence:")
    for key, value in shown:
        lines.append(f"    {key}: {format_value(value)}")
    if isinstance(per_rank, Mapping):
        for rank, values in per_rank.items():
            lines.append(f"    rank {rank}: {format_value(values)}")
    if finding.get("help"):
        lines.append(f"  help: {finding['help']}")
    return lines


def _bytes(n: Any) -> str:
    """A memory size, up to TiB; ``n/a`` when it was not measured."""
    return format_bytes(n, largest="TiB") if n else "n/a"


def _table_rows(per: Mapping[str, Any], measured: Mapping[str, Any]) -> list[tuple[str, Any, str]]:
    """(label, ms or None, note) per row; None prints the note instead of a number."""
    rows: list[tuple[str, Any, str]] = []
    split = measured.get("forward", per.get("forward") is not None)
    for key, label in _ROWS:
        if key == "data_wait":
            if measured.get("data_wait", per.get("data_wait") is not None):
                rows.append((label, per.get("data_wait") or 0.0, ""))
            else:
                rows.append(
                    (
                        label,
                        None,
                        "no DataLoader read: the data path is in other host work" if split else "no DataLoader read",
                    )
                )
        elif key in ("transfer", "sync"):
            if per.get(key):
                rows.append((label, per[key], ""))
        elif key in ("forward", "backward"):
            if split:
                rows.append((label, per.get(key) or 0.0, ""))
            elif key == "forward":
                rows.append(
                    (
                        "forward + backward + other host work",
                        per.get("compute") or 0.0,
                        "(not separated: no nn.Module forward was seen)",
                    )
                )
        elif key == "other":
            if split:
                rows.append((label, per.get("other") or 0.0, ""))
        elif key == "optimizer" and not measured.get("optimizer", True):
            rows.append(
                (
                    label,
                    None,
                    "no torch.optim optimizer stepped (the loop updates the "
                    "parameters itself; that time is in other host work)",
                )
            )
        else:
            rows.append((label, per.get(key) or 0.0, ""))
    return rows


def _profile_lines(profile: Mapping[str, Any]) -> list[str]:
    if not profile:
        return []
    steps = profile.get("steps", 0)
    if not steps and not profile.get("batches"):
        return []  # nothing ran (the script exited before training): no empty profile
    lines = [
        f"Profile: {profile.get('verdict', 'unknown')} "
        f"({profile.get('steady_steps', 0)} steady steps of {steps}, "
        f"{profile.get('warmup_steps', 0)} warm-up)"
    ]
    if profile.get("reason"):
        lines.append(f"  {profile['reason']}")
    per = profile.get("per_step_ms") or {}
    measured = profile.get("measured") or {}
    gpu = profile.get("gpu")
    if profile.get("steady_steps"):
        width = _LABEL_WIDTH
        head = "per step, host time" if gpu or per.get("sync") else "per step"
        lines.append(f"  {head:<{width}}{'ms':>10}{'share':>8}")
        step = per.get("step") or 0.0
        for label, ms, note in _table_rows(per, measured):
            if ms is None:
                lines.append(f"  {label:<{width}}{'-':>10}{'':>8}  not measured: {note}")
                continue
            share = f"{ms / step:.0%}" if step else "-"
            suffix = f"  {note}" if note else ""
            lines.append(f"  {label:<{width}}{ms:>10.3f}{share:>8}{suffix}")
        lines.append(f"  {'step (mean)':<{width}}{step:>10.3f}{'100%':>8}")
        doctor = per.get("doctor") or 0.0
        if doctor > 0:
            part = doctor / (step + doctor)
            lines.append(
                f"  {'watching (the doctor, left out of the rows)':<{width}}{doctor:>10.3f}"
                f"{part:>8.0%} of the watched step"
                + (": the rows are less certain" if part >= DOCTOR_SHARE_NOTED else "")
            )
    if gpu:
        lines.extend(gpu_lines(gpu))
    host = profile.get("host_work") or []
    if host:
        lines.append(
            f"  other host work, sampled ({profile.get('host_work_samples', 0)} samples "
            "of the training thread between the timed calls):"
        )
        for item in host[:3]:
            where = f"{_relpath(str(item.get('file', '')))}:{item.get('line')}"
            func = item.get("function")
            text = f"{where} in {func}()" if func and func != "<module>" else where
            if item.get("loop_line") and item.get("loop_line") != item.get("line"):
                text += f", called from the training loop at line {item['loop_line']}"
            lines.append(f"    {item.get('share', 0):>4.0%}  {text}")
    extras = []
    throughput = throughput_text(profile)
    if throughput:
        extras.append(throughput)
    if profile.get("backward_per_step") not in (None, 1.0):
        extras.append(f"{profile['backward_per_step']:g} backward calls per step")
    mem = profile.get("memory") or {}
    if mem.get("cuda_reserved_peak_bytes"):
        text = (
            f"peak GPU memory {_bytes(mem.get('cuda_allocated_peak_bytes'))} allocated / "
            f"{_bytes(mem['cuda_reserved_peak_bytes'])} reserved of {_bytes(mem.get('cuda_total_bytes'))}"
        )
        if mem.get("cuda_peak_exact") is False:
            text += " (allocated: the largest sampled at step ends; the process peak predates the watch)"
        if mem.get("cuda_fragmentation_bytes"):
            text += f", {_bytes(mem['cuda_fragmentation_bytes'])} cached unused"
        if mem.get("cuda_alloc_retries"):
            text += f", {mem['cuda_alloc_retries']} allocator retries (close to the limit)"
        if mem.get("cuda_ooms"):
            text += f", {mem['cuda_ooms']} out-of-memory errors"
        if mem.get("cuda_batch_fit_factor"):
            text += f"; a batch about {mem['cuda_batch_fit_factor']:g}x larger would fit"
        extras.append(text)
    if mem.get("rss_peak_bytes"):
        extras.append(f"peak RSS {_bytes(mem['rss_peak_bytes'])}")
    if extras:
        lines.append("  " + "; ".join(extras))
    for rank, summary in (profile.get("per_rank") or {}).items():
        lines.append(f"  rank {rank}: {format_value(summary)}")
    return lines


def _si(value: float, unit: str) -> str:
    """``1.23 GFLOP``-style: the value with an SI prefix."""
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def throughput_text(profile: Mapping[str, Any]) -> str:
    """``throughput 512.0 samples/s, 65536 tokens/s; MFU 41.2% ...`` (empty when nothing was measured)."""
    if not profile.get("samples_per_s"):
        return ""
    text = f"throughput {profile['samples_per_s']:.1f} samples/s"
    if profile.get("tokens_per_s"):
        text += f", {profile['tokens_per_s']:.0f} tokens/s"
    tp = profile.get("throughput") or {}
    if not tp.get("flops_per_step"):
        return text
    per = f"{_si(tp['flops_per_sample'], 'FLOP')} per sample" if tp.get("flops_per_sample") else ""
    per = per or f"{_si(tp['flops_per_step'], 'FLOP')} per step"
    counted = f"{per}, counted on step {tp.get('flops_step')} with FlopCounterMode"
    if tp.get("mfu") is not None:
        precisions = "/".join(sorted(tp.get("flops_by_precision") or {}))
        text += (
            f"; MFU {tp['mfu']:.1%} of the {tp.get('peak_device')} {precisions} peak "
            f"({counted}; unvalidated on hardware)"
        )
    elif tp.get("mfu_note"):
        text += f"; {tp['mfu_note']} ({counted})"
    return text


_IDLE_LABELS = (
    ("data", "waiting for the DataLoader"),
    ("host", "host work (Python, kernel launches)"),
    ("sync", "after synchronisations"),
    ("transfer", "after blocking copies"),
)


def gpu_lines(gpu: Mapping[str, Any]) -> list[str]:
    """The device-time block of a CUDA run's profile (see ``runtime/gpu_profile.py``)."""
    per = gpu.get("per_step_ms") or {}
    busy, idle = per.get("busy") or {}, per.get("idle") or {}
    span = per.get("gpu_step") or 0.0
    lines = [
        f"  GPU, device time ({gpu.get('platform', 'CUDA')} events on device {gpu.get('device_index')}, "
        f"{gpu.get('steady_timed_steps', 0)} steady steps): {span:.3f} ms per step, "
        f"busy {gpu.get('busy_share', 0):.0%}, idle {gpu.get('idle_share', 0):.0%}"
    ]
    names = (("transfer", "copies"), ("forward", "forward"), ("backward", "backward"), ("optimizer", "optimizer"))
    parts = [f"{label} {busy.get(key, 0):.3f}" for key, label in names] + [f"loop {busy.get('other', 0):.3f}"]
    lines.append(f"    busy ms: {', '.join(parts)}")
    idle_parts = [f"{label} {idle.get(key, 0):.3f}" for key, label in _IDLE_LABELS if idle.get(key)]
    if idle_parts:
        syncs = gpu.get("syncs_per_step") or 0
        lines.append(
            f"    idle ms: {', '.join(idle_parts)}"
            + (f"; {syncs:g} sync{'' if syncs == 1 else 's'} per step" if syncs else "")
        )
    lines.append(
        "    (the host rows above are host time: on a GPU forward, backward and optimizer are kernel "
        "launches, and the GPU's work shows here)"
    )
    if gpu.get("failed_event_pairs"):
        lines.append(f"    {gpu['failed_event_pairs']} event pairs could not be read (left out)")
    return lines


def render_text(report: Mapping[str, Any]) -> str:
    """Findings (as the static checker prints them, plus evidence), then the profile."""
    findings = report.get("findings") or []
    out: list[str] = []
    if report.get("partial"):
        env = report.get("environment") or {}
        why = env.get("partial_reason") or "the run was interrupted"
        out.append(f"traindoctor: partial report ({why})")
    for finding in findings:
        out.extend(_finding_lines(finding))
    if findings:
        counts: dict[str, int] = {}
        for f in findings:
            counts[f["severity"]] = counts.get(f["severity"], 0) + 1
        detail = ", ".join(
            f"{counts[s]} {s}{'s' if counts[s] != 1 else ''}" for s in ("error", "warning", "info") if s in counts
        )
        noun = "finding" if len(findings) == 1 else "findings"
        out.append(f"Found {len(findings)} runtime {noun} ({detail}).")
    else:
        out.append("No runtime findings.")
    out.append("")
    profile = report.get("profile") or {}
    lines = _profile_lines(profile)
    if not lines and profile:
        code = (report.get("environment") or {}).get("exit_code")
        ended = f" (the script ended with exit code {code} first)" if code not in (None, 0) else ""
        lines = [f"No training step ran{ended}: nothing to profile."]
    out.extend(lines)
    env = report.get("environment") or {}
    if env.get("world_size", 1) and env.get("world_size", 1) > 1:
        merged = env.get("ranks_merged")
        missing = env.get("ranks_missing")
        text = f"Distributed: world size {env['world_size']}"
        if merged is not None:
            text += f", ranks merged {merged}"
        if missing:
            text += f", ranks missing {missing}"
        out.append(text)
    for note in report.get("notes") or []:
        out.append(f"traindoctor note: {note}")
    return "\n".join(out).rstrip("\n") + "\n"
