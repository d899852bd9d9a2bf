"""The step profile: components per step, warm-up exclusion, verdicts with their numbers."""

from __future__ import annotations

import pytest
from helpers.data_loops import SleepyDataset, train
from torch.utils.data import DataLoader

import traindoctor
from traindoctor.report.run import render_text
from traindoctor.runtime.profile import build_profile, default_warmup
from traindoctor.runtime.step_timer import StepRecord, StepTimer


def _records(
    n: int, *, wall: float, data: float = 0.0, transfer: float = 0.0, optimizer: float = 0.0, samples: int = 8
) -> list[StepRecord]:
    out, t = [], 0.0
    for i in range(n):
        out.append(StepRecord(i + 1, t, t + wall, data, transfer, optimizer, 1, samples, 1))
        t += wall
    return out


def test_verdicts_name_the_largest_share_with_numbers() -> None:
    data = build_profile(_records(20, wall=0.1, data=0.06), run_s=2.0)
    assert data.verdict == "data-bound"
    assert "60%" in data.reason and "60 ms of 100 ms" in data.reason
    transfer = build_profile(_records(20, wall=0.1, data=0.01, transfer=0.5 * 0.1), run_s=2.0)
    assert transfer.verdict == "transfer-bound"
    compute = build_profile(_records(20, wall=0.1, data=0.01, optimizer=0.01), run_s=2.0)
    assert compute.verdict == "compute-bound"
    assert compute.shares["compute"] == pytest.approx(0.9)
    assert compute.samples_per_s == pytest.approx(80.0)


def test_memory_bound_when_peak_memory_is_near_capacity() -> None:
    mem = {
        "cuda_allocated_peak_bytes": 76 * 2**30,
        "cuda_reserved_peak_bytes": 79 * 2**30,
        "cuda_total_bytes": 80 * 2**30,
    }
    prof = build_profile(_records(10, wall=0.1, data=0.08), run_s=1.0, memory=mem)
    assert prof.verdict == "memory-bound" and "95%" in prof.reason and "allocated" in prof.reason


def test_memory_bound_is_judged_on_allocated_not_reserved_memory() -> None:
    # the caching allocator holds 79 GiB, tensors use 40: the cache is given back before an
    # allocation fails, so a larger batch still fits
    mem = {
        "cuda_allocated_peak_bytes": 40 * 2**30,
        "cuda_reserved_peak_bytes": 79 * 2**30,
        "cuda_total_bytes": 80 * 2**30,
    }
    prof = build_profile(_records(10, wall=0.1, data=0.08), run_s=1.0, memory=mem)
    assert prof.verdict == "data-bound"
    relaxed = build_profile(
        _records(10, wall=0.1, data=0.08), run_s=1.0, memory=mem, thresholds={"profile.memory_bound_share": 0.99}
    )
    assert relaxed.verdict == "data-bound"


def test_warmup_steps_are_excluded() -> None:
    records = _records(20, wall=0.01)
    records[0] = StepRecord(1, -5.0, 0.01, 4.9, 0.0, 0.0, 1, 8, 1)  # worker start-up, lazy init
    prof = build_profile(records, run_s=6.0)
    assert (prof.warmup_steps, prof.steady_steps) == (2, 18)
    assert prof.step_s == pytest.approx(0.01) and prof.data_s == 0.0
    assert default_warmup(1) == 0 and default_warmup(3) == 1 and default_warmup(500) == 5
    fixed = build_profile(records, run_s=6.0, thresholds={"profile.warmup_steps": 0})
    assert fixed.data_s > 0.2


def test_step_timer_splits_wall_time_into_components() -> None:
    timer = StepTimer()
    timer.add_batch(0.02, t_end=1.02, samples=4)  # waited 20 ms, batch arrived at t=1.02
    timer.add_transfer(0.005, t_end=1.03)
    timer.add_backward()
    timer.optimizer_pre(1.08)
    record = timer.optimizer_post(1.09, closes_step=True)
    assert record is not None
    assert record.wall_s == pytest.approx(0.09)
    assert record.data_s == pytest.approx(0.02) and record.transfer_s == pytest.approx(0.005)
    assert record.optimizer_s == pytest.approx(0.01)
    assert record.compute_s == pytest.approx(0.055)
    assert (record.samples, record.backward_calls) == (4, 1)


def test_real_loop_profile_is_data_bound_with_samples_counted() -> None:
    with traindoctor.watch(select=[]) as doctor:
        train(DataLoader(SleepyDataset(40, delay_s=0.005), batch_size=4))
    prof = doctor.profile
    assert prof.steps == 10 and prof.samples == 40 and prof.batches == 10
    assert prof.verdict == "data-bound"
    assert prof.data_s >= 0.018  # 4 samples x 5 ms
    assert prof.memory["rss_peak_bytes"] > 0
    text = render_text(doctor.report_dict())
    assert "Profile: data-bound" in text and "data wait" in text and "samples/s" in text
    assert "host-to-device" not in text  # a CPU run copies nothing to a device


def test_text_profile_rows_match_the_verdict_reason() -> None:
    """Without forward timing the remainder is one row that says it is not separated; copies
    show when seen; a DataLoader wait that was measured shows as a number."""
    compute = build_profile(_records(20, wall=0.1, data=0.01, optimizer=0.01), run_s=2.0)
    text = render_text({"findings": [], "profile": compute.to_dict()})
    assert "compute and optimizer step takes 90%" in text
    assert "host-to-device" not in text
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["per", "step"])
    table = [line.split("  ")[1] for line in lines[start + 1 : start + 4]]
    assert table == ["data wait (DataLoader next())", "forward + backward + other host work", "optimizer step"]
    assert "(not separated: no nn.Module forward was seen)" in text
    copies = build_profile(_records(20, wall=0.1, transfer=0.02), run_s=2.0)
    text = render_text({"findings": [], "profile": copies.to_dict()})
    assert any(line.split()[:3] == ["host-to-device", "copies", "20.000"] for line in text.splitlines())


def test_no_steps_gives_no_verdict_but_a_reason() -> None:
    with traindoctor.watch(select=[]) as doctor:
        pass
    assert doctor.profile.steps == 0
    assert doctor.profile.verdict == "unknown" and doctor.profile.reason


def test_doctor_time_inside_a_measured_phase_is_not_taken_out_twice() -> None:
    """A step of 12 ms whose .item() wait (sync, 8 ms) and optimizer (3 ms) were measured, with
    1.5 ms of the doctor's own work, part of it inside those phases: the step is never shorter
    than its measured phases, so the profile's rows add up to the step."""
    record = StepRecord(1, 0.0, 0.012, 0.0, 0.0, 0.003, 1, 8, 1, sync_s=0.008, doctor_s=0.0015)
    assert record.own_s == pytest.approx(0.0110)  # 12 - 1.5 = 10.5 < 11 measured: 11
    assert record.remainder_s == 0.0
    plain = StepRecord(1, 0.0, 0.012, 0.0, 0.0, 0.003, 1, 8, 1, sync_s=0.006, doctor_s=0.0015)
    assert plain.own_s == pytest.approx(0.0105) and plain.remainder_s == pytest.approx(0.0015)
