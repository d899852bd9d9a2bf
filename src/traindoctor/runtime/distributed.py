"""Distributed runs: every rank watches itself; rank 0 merges the ranks' reports.

Under ``torchrun`` each rank runs ``traindoctor run`` in its own process. At the end every rank
writes its report (JSON) into a folder shared by the ranks of this node (named after the launcher
process, the ranks' common parent, and the rendezvous port), and rank 0 waits for them (up to a
timeout), merges them, and writes the one report. Files, not collectives: the training script has
usually destroyed its process group by the time the doctor reports, and a crashed rank must not
hang the others. Ranks on other nodes cannot be read from here; the merged report lists them as
missing.

Merging: findings with the same code and place are one finding; its evidence is the lowest rank's
plus ``ranks`` and ``per_rank`` (each rank's own evidence, e.g. its data-wait share).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from typing import Any, Mapping, Sequence

#: Seconds rank 0 waits for the other ranks' reports.
DEFAULT_WAIT_S = 60.0


def is_distributed() -> bool:
    """Whether this process is one rank of a multi-process launch (``torchrun`` sets the env)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1")) > 1
    except ValueError:
        return False


def shared_dir() -> str:
    """The folder this node's ranks exchange reports in (same for all ranks of one launch)."""
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "run")
    port = os.environ.get("MASTER_PORT", "0")
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in f"{run_id}-{port}")
    return os.path.join(tempfile.gettempdir(), f"traindoctor-{os.getppid()}-{safe}")


def write_rank_report(report: Mapping[str, Any], rank: int, folder: str | None = None) -> str:
    """Write this rank's report atomically; returns the path."""
    folder = folder or shared_dir()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"rank{rank}.json")
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(report, fh, default=str)
    os.replace(tmp, path)
    return path


def collect_rank_reports(
    expected: Sequence[int], folder: str | None = None, timeout_s: float = DEFAULT_WAIT_S
) -> dict[int, dict[str, Any]]:
    """Read the reports of ``expected`` ranks, waiting up to ``timeout_s`` for them to appear."""
    folder = folder or shared_dir()
    deadline = time.monotonic() + timeout_s
    found: dict[int, dict[str, Any]] = {}
    while True:
        for rank in expected:
            if rank in found:
                continue
            path = os.path.join(folder, f"rank{rank}.json")
            try:
                with open(path, encoding="utf-8") as fh:
                    found[rank] = json.load(fh)
            except (OSError, ValueError):
                continue
        if len(found) == len(expected) or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


def remove_shared_dir(folder: str | None = None) -> None:
    shutil.rmtree(folder or shared_dir(), ignore_errors=True)


def _profile_summary(profile: Mapping[str, Any]) -> dict[str, Any]:
    shares = profile.get("shares") or {}
    per = profile.get("per_step_ms") or {}
    return {
        "verdict": profile.get("verdict"),
        "step_ms": per.get("step"),
        "data_share": shares.get("data"),
        "samples_per_s": profile.get("samples_per_s"),
    }


def merge_reports(reports: Mapping[int, Mapping[str, Any]], world_size: int) -> dict[str, Any]:
    """One report from several ranks' reports (see the module docstring)."""
    ranks = sorted(reports)
    if not ranks:
        return {"findings": [], "profile": {}, "environment": {}, "notes": [], "partial": True}
    base = reports[ranks[0]]
    groups: dict[tuple[Any, ...], list[tuple[int, Mapping[str, Any]]]] = {}
    for rank in ranks:
        for finding in reports[rank].get("findings") or []:
            loc = finding.get("location") or {}
            key = (finding.get("code"), finding.get("filename"), loc.get("row"))
            groups.setdefault(key, []).append((rank, finding))
    findings = []
    for key in sorted(groups, key=lambda k: tuple("" if v is None else str(v) for v in k)):
        members = groups[key]
        first = dict(members[0][1])
        evidence = dict(first.get("evidence") or {})
        evidence["ranks"] = [rank for rank, _ in members]
        evidence["per_rank"] = {str(rank): dict(f.get("evidence") or {}) for rank, f in members}
        first["evidence"] = evidence
        findings.append(first)
    profile = dict(base.get("profile") or {})
    profile["per_rank"] = {str(r): _profile_summary(reports[r].get("profile") or {}) for r in ranks}
    rates = [(reports[r].get("profile") or {}).get("samples_per_s") for r in ranks]
    if all(isinstance(x, (int, float)) for x in rates):
        profile["samples_per_s_all_ranks"] = round(sum(rates), 3)  # type: ignore[arg-type]
    environment = dict(base.get("environment") or {})
    environment["ranks_merged"] = ranks
    environment["ranks_missing"] = [r for r in range(world_size) if r not in reports]
    notes: list[str] = []
    for rank in ranks:
        for note in reports[rank].get("notes") or []:
            notes.append(f"rank {rank}: {note}")
    partial = any(bool(reports[r].get("partial")) for r in ranks) or bool(environment["ranks_missing"])
    profile["partial"] = partial
    return {
        "findings": findings,
        "profile": profile,
        "timeline": list(base.get("timeline") or []),  # rank 0's (the HTML report's charts)
        "environment": environment,
        "notes": notes,
        "partial": partial,
    }


def gather(report: Mapping[str, Any], *, rank: int, world_size: int, local_world_size: int,
           timeout_s: float = DEFAULT_WAIT_S) -> dict[str, Any] | None:
    """Exchange reports through the shared folder. Rank 0 gets the merged report, others ``None``.

    Rank 0 expects the ranks of its own node (``0 .. local_world_size-1``); others are reported
    missing in ``environment.ranks_missing``.
    """
    folder = shared_dir()
    write_rank_report(report, rank, folder)
    if rank != 0:
        return None
    expected = list(range(max(local_world_size, 1)))
    found = collect_rank_reports(expected, folder, timeout_s)
    remove_shared_dir(folder)
    return merge_reports(found, world_size)
