"""The report's per-step timeline: downsampling, memory sampling, and a real watched run."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import pytest
from helpers.data_loops import SleepyDataset, train
from torch.utils.data import DataLoader

import traindoctor
from traindoctor.runtime.step_timer import StepRecord
from traindoctor.runtime.timeline import MAX_POINTS, MemorySampler, build_timeline


def _records(n: int, wall: float = 0.01, data: float = 0.004) -> list[StepRecord]:
    return [StepRecord(i + 1, i * wall, (i + 1) * wall, data, 0.0, 0.001, 1, 8, 1) for i in range(n)]


def test_one_point_per_step_for_short_runs() -> None:
    points = build_timeline(_records(12), warmup_steps=2)
    assert [p["step"] for p in points] == list(range(1, 13))
    first = points[0]
    assert first["steps"] == 1 and first["warmup"] is True and points[2]["warmup"] is False
    assert first["wall_ms"] == pytest.approx(10.0)
    assert first["data_ms"] == pytest.approx(4.0)
    assert first["optimizer_ms"] == pytest.approx(1.0)
    assert first["compute_ms"] == pytest.approx(5.0)
    assert first["samples_per_s"] == pytest.approx(800.0)
    assert "device_ms" not in first  # None on CPU: no series


def test_long_runs_are_grouped_into_at_most_max_points_means() -> None:
    records = _records(1000)
    records[500] = StepRecord(501, 5.0, 5.1, 0.09, 0.0, 0.001, 1, 8, 1)  # one slow step
    points = build_timeline(records)
    assert len(points) <= MAX_POINTS
    assert sum(p["steps"] for p in points) == 1000
    assert points[-1]["step"] == 1000
    slow = next(p for p in points if p["step"] - p["steps"] < 501 <= p["step"])
    # The group's mean carries the slow step: (0.09 + 3 * 0.004) / 4 s.
    assert slow["data_ms"] == pytest.approx((90 + 4 * (slow["steps"] - 1)) / slow["steps"])
    assert build_timeline(records, max_points=10)[0]["steps"] == 100


def test_components_added_to_step_records_later_show_up() -> None:
    @dataclass
    class WithOther:
        index: int
        end: float

        def to_dict(self) -> dict[str, Any]:
            return {
                "index": self.index,
                "wall_s": 0.01,
                "data_s": 0.002,
                "other_host_s": 0.003,
                "samples": 4,
                "device_s": None,
                "flag_s": True,
            }

    points = build_timeline([WithOther(1, 0.01), WithOther(2, 0.02)])
    assert points[0]["other_host_ms"] == pytest.approx(3.0)
    assert "flag_ms" not in points[0] and "device_ms" not in points[0]


def test_memory_sampler_keeps_a_bounded_evenly_spread_series() -> None:
    sampler = MemorySampler(cap=8)
    for record in _records(1000):
        sampler(record)
    steps = [s["step"] for s in sampler.samples]
    if sys.platform.startswith("linux"):
        assert 8 <= len(steps) < 16
        assert sampler.stride == 64
        assert all(s % sampler.stride == 0 for s in steps) and steps[-1] >= 1000 - sampler.stride
        assert all(s["rss_bytes"] > 10 * 2**20 for s in sampler.samples)


def test_memory_samples_join_the_points_at_or_before_their_step() -> None:
    memory = [{"step": 2, "rss_bytes": 100}, {"step": 4, "rss_bytes": 200}]
    points = build_timeline(_records(5), memory=memory)
    assert [p.get("rss_bytes") for p in points] == [None, 100, 100, 200, 200]


def test_watched_run_reports_a_timeline_matching_its_profile() -> None:
    loader = DataLoader(SleepyDataset(size=48, delay_s=0.002), batch_size=4)
    with traindoctor.watch() as doctor:
        train(loader)
    report = doctor.report_dict()
    timeline, profile = report["timeline"], report["profile"]
    assert [p["step"] for p in timeline] == list(range(1, 13))
    assert sum(p["warmup"] for p in timeline) == profile["warmup_steps"]
    steady = [p for p in timeline if not p["warmup"]]
    mean_data = sum(p["data_ms"] for p in steady) / len(steady)
    assert mean_data == pytest.approx(profile["per_step_ms"]["data_wait"], rel=1e-3, abs=1e-3)
    assert all(p["data_ms"] >= 4 * 2.0 * 0.9 for p in steady)  # 4 samples x 2 ms sleep each
    assert all(p["samples"] == 4 for p in timeline)
    if sys.platform.startswith("linux"):
        assert all(p["rss_bytes"] > 0 for p in timeline)


def test_a_distributed_report_keeps_rank_zeros_timeline() -> None:
    from traindoctor.doctor.distributed import merge_reports

    def report(rank: int) -> dict[str, Any]:
        return {
            "findings": [],
            "profile": {"samples_per_s": 10.0},
            "environment": {"rank": rank},
            "notes": [],
            "partial": False,
            "timeline": [{"step": 1, "rank": rank}],
        }

    merged = merge_reports({1: report(1), 0: report(0)}, world_size=2)
    assert merged["timeline"] == [{"step": 1, "rank": 0}]


def test_the_timeline_is_built_only_for_outputs_that_read_it() -> None:
    """The text report never prints the timeline, so ``traindoctor run`` does not build it; the
    JSON and HTML reports and a multi-rank run (whose merged report carries rank 0's) do."""
    from traindoctor.doctor.cli import _base_report, parse_args

    loader = DataLoader(SleepyDataset(size=16, delay_s=0.0), batch_size=4)
    with traindoctor.watch() as doctor:
        train(loader)
    assert "timeline" not in _base_report(doctor, parse_args(["loop.py"]), 0)
    for argv in (["--output-format", "json", "loop.py"], ["--html", "r.html", "loop.py"]):
        assert [p["step"] for p in _base_report(doctor, parse_args(argv), 0)["timeline"]] == [1, 2, 3, 4]
    doctor.world_size = 2
    assert "timeline" in _base_report(doctor, parse_args(["loop.py"]), 0)
