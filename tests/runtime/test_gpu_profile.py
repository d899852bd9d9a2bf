"""The device-time profile against the simulated asynchronous device's truth.

Each loop is a real CPU training loop whose kernels also run on ``helpers.sim_cuda``'s simulated
device, behind the host, with known durations. The profile must give the right verdict, and the
number the verdict rests on must be within 10% of the simulation's truth (the GPU busy share
within 10 points).
"""

from __future__ import annotations

import pytest
from helpers.sim_cuda import SimulatedCuda
from helpers.sim_loops import run_sim_loop

from traindoctor.runtime.phases import PHASE_SYNC, PHASE_TRANSFER


def _close(measured: float, truth: float, rel: float = 0.10) -> bool:
    return abs(measured - truth) <= rel * truth


def _busy_share_close(gpu, truth) -> None:
    assert abs(gpu.busy_s / gpu.span - truth.busy[None] / truth.span) <= 0.10, (gpu.busy, truth.busy)


def test_gpu_bound_loop_with_blocking_copies_is_compute_bound_not_transfer_bound() -> None:
    # pageable batches copied with a blocking .to() each step, no .item(): the host time of the
    # copy is the previous step's compute (the old probe called this "transfer-bound 90%")
    session, truth, _sim = run_sim_loop(fwd=(1, 0.003, 0.0), bwd=(1, 0.004, 0.0), opt=(1, 0.001, 0.0))
    gpu = session.profile.gpu
    assert session.profile.verdict == "compute-bound", session.profile.reason
    assert _close(gpu.compute_s, truth.busy[None]), (gpu.busy, truth.busy)
    for part, label in (("forward", "forward"), ("backward", "backward"), ("optimizer", "optimizer")):
        assert _close(gpu.busy[part], truth.busy[label]), (part, gpu.busy, truth.busy)
    assert gpu.busy["transfer"] < 0.05 * gpu.span
    _busy_share_close(gpu, truth)
    # the host-time profile still shows the copies waiting: the report must not call that copy time
    assert session.profile.transfer_s > 0.5 * gpu.span
    assert "GPU busy" in session.profile.reason and "steady steps" in session.profile.reason


def test_data_bound_loop() -> None:
    session, truth, _sim = run_sim_loop(item_s=0.002, fwd=(1, 0.001, 0.0), bwd=(1, 0.001, 0.0))
    gpu = session.profile.gpu
    assert session.profile.verdict == "data-bound", session.profile.reason
    assert gpu.idle["data"] > 0.6 * gpu.span
    assert _close(gpu.idle_s, truth.idle), (gpu.idle, truth.idle)
    _busy_share_close(gpu, truth)


def test_host_bound_loop_of_many_tiny_kernels() -> None:
    launches = (100, 1e-6, 25e-6)  # 100 kernels of 1 us, each launch costs the host 25 us
    session, truth, _sim = run_sim_loop(fwd=launches, bwd=launches, opt=(20, 1e-6, 25e-6))
    gpu = session.profile.gpu
    assert session.profile.verdict == "host-bound", session.profile.reason
    assert _close(gpu.idle["host"], truth.idle), (gpu.idle, truth.idle)
    _busy_share_close(gpu, truth)
    # the host profile is honest too: forward/backward/optimizer are launch time, and said to be
    assert session.profile.forward_s is not None and session.profile.forward_s > 0.002


def test_item_every_step_is_sync_bound() -> None:
    session, truth, _sim = run_sim_loop(item=True, host_after_s=0.004)
    gpu = session.profile.gpu
    assert session.profile.verdict == "sync-bound", session.profile.reason
    assert gpu.syncs_per_step == pytest.approx(1.0)
    assert gpu.idle["sync"] > 0.6 * gpu.idle_s
    assert _close(gpu.idle_s, truth.idle), (gpu.idle, truth.idle)
    assert _close(gpu.compute_s, truth.busy[None]), (gpu.busy, truth.busy)
    # the site of the sync is the loop's line (TD801's evidence)
    (site, seconds), *_ = sorted(gpu.sync_sites.items(), key=lambda kv: -kv[1])
    assert site is not None and site[0].endswith("sim_loops.py") and seconds > 0


def _copy_sim() -> SimulatedCuda:
    nbytes = 16 * 8 * 4  # one batch of x: 16 samples of 8 float32 (y is 8x smaller)
    return SimulatedCuda(pageable_gbps=nbytes / 0.008 / 1e9, pinned_gbps=nbytes / 0.002 / 1e9)


@pytest.mark.parametrize("pinned", [False, True])
def test_transfer_bound_loop_pageable_and_pinned(pinned: bool) -> None:
    session, truth, _sim = run_sim_loop(
        sim=_copy_sim(),
        batch=16,
        pinned=pinned,
        non_blocking=pinned,
        fwd=(1, 0.0005, 0.0),
        bwd=(1, 0.0005, 0.0),
        opt=(1, 0.0002, 0.0),
    )
    gpu = session.profile.gpu
    assert session.profile.verdict == "transfer-bound", session.profile.reason
    assert _close(gpu.busy["transfer"], truth.busy["copy"]), (gpu.busy, truth.busy)
    _busy_share_close(gpu, truth)
    # pinned + non_blocking frees the host; a pageable copy holds it for the whole copy
    host_copy = session.profile.transfer_s
    if pinned:
        assert host_copy < 0.2 * truth.busy["copy"]
        assert gpu.idle["transfer"] == 0.0
    else:
        assert host_copy > 0.9 * truth.busy["copy"]
        assert "blocking copies" in session.profile.reason or gpu.idle["transfer"] == 0.0


def test_a_failing_event_pair_drops_one_boundary_not_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers import sim_cuda

    calls = {"n": 0}
    original = sim_cuda.SimEvent.elapsed_time

    def flaky(self, end):
        calls["n"] += 1
        if calls["n"] % 17 == 0:
            raise RuntimeError("CUDA error: invalid resource handle")
        return original(self, end)

    monkeypatch.setattr(sim_cuda.SimEvent, "elapsed_time", flaky)
    session, _truth, _sim = run_sim_loop()
    gpu = session.profile.gpu
    assert gpu is not None and gpu.failed_pairs > 0
    assert session.profile.verdict == "compute-bound"


def test_events_are_read_without_synchronising_during_the_run() -> None:
    sim = SimulatedCuda()
    syncs = []
    original = sim.synchronize
    sim.synchronize = lambda device: (syncs.append(device), original(device))[-1]  # type: ignore[method-assign]
    session, _truth, _sim = run_sim_loop(sim=sim, steps=40)
    assert len(syncs) <= 1  # once, at the end of the watch
    timer = session.gpu.timer
    assert len(timer.steps) >= 35  # every step timed, each read once the device passed it


def test_ddp_style_to_rank_times_its_own_device() -> None:
    # rank 1 moves its model and batches with .to(1) and never calls set_device: device 0 stays
    # current, and nothing may be timed, created or read there
    sim = SimulatedCuda(devices=2, current=0)
    session, truth, _sim = run_sim_loop(sim=sim, device=1)
    assert session.gpu.device == 1 and session.profile.gpu.device == 1
    assert sim.gpus[0].touched == 0 and sim.gpus[1].touched > 0
    assert session.profile.verdict == "compute-bound"
    assert _close(session.profile.gpu.compute_s, truth.busy[None])


def test_phases_marked_on_the_device_are_copies_and_syncs() -> None:
    session, _truth, _sim = run_sim_loop(item=True, steps=6)
    phases = {iv.phase for step in session.gpu.timer.steps for iv in step.intervals}
    assert PHASE_TRANSFER in phases and PHASE_SYNC in phases


def test_text_and_html_reports_show_device_time_beside_host_time() -> None:
    from traindoctor.report.html import render_run_html
    from traindoctor.report.run import render_text

    session, _truth, _sim = run_sim_loop(item=True, host_after_s=0.004, steps=12)
    report = session.report_dict()
    text = render_text(report)
    assert "Profile: sync-bound" in text
    assert "per step, host time" in text
    assert "GPU, device time (CUDA events on device 0" in text
    assert "after synchronisations" in text and "1 sync per step" in text
    html = render_run_html(report)
    assert 'id="gpu-table"' in html and "chart-gpu" in html
    assert "Sync-bound: the GPU idles" in html
    steps = report["profile"]["gpu"]["steps"]
    assert steps and all(s["busy_ms"] + s["idle_ms"] == pytest.approx(s["gpu_ms"], abs=2e-3) for s in steps)
