"""The rank guard's two ways to end a rank must not race: when the guard thread has started an
emergency report (a stall fired) and the main thread then reaches its normal end (the collective
it was blocked in raised because the other rank exited), the main thread waits for the emergency
report instead of letting the interpreter exit under it.

This was a real flake: the hang case under torchrun lost rank 0's merged report whenever rank
0's own stall timer fired just before the all-reduce raised (see test_distributed_failures.py).
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from traindoctor.doctor import distributed


class FakeSession:
    def __init__(self) -> None:
        self.rank, self.world_size, self.local_world_size = 0, 2, 2
        self.step = 3
        self.thresholds = {"distributed.wait_s": 5, "distributed.stall_s": 0}
        self.timer = SimpleNamespace(_batches=3)
        self.notes: list[str] = []
        self.partial = False
        self.stops = 0

    def stop(self, exc_type: Any) -> None:
        self.stops += 1


@pytest.fixture
def guard_env(tmp_path, monkeypatch):
    monkeypatch.setattr(distributed, "shared_dir", lambda: str(tmp_path / "shared"))
    exits: list[int] = []
    exited = threading.Event()

    def fake_exit(code: int) -> None:  # the real one ends the process; this one only records
        exits.append(code)
        exited.set()

    monkeypatch.setattr(distributed.os, "_exit", fake_exit)
    return exits, exited


def test_main_thread_end_waits_for_a_running_emergency_report(guard_env, monkeypatch):
    exits, exited = guard_env
    written: list[dict] = []
    gather_started = threading.Event()
    real_gather = distributed.gather

    def slow_gather(report, **kwargs):
        gather_started.set()
        time.sleep(0.5)  # collecting the other rank's report takes a while
        return real_gather(report, **{**kwargs, "timeout_s": 0.1})

    monkeypatch.setattr(distributed, "gather", slow_gather)
    session = FakeSession()
    guard = distributed.RankGuard(session, written.append, base_report=lambda: {"environment": {}, "notes": []})
    guard.failure = {"how": "stalled", "seconds": 3.0, "time": time.time()}
    emergency = threading.Thread(target=lambda: _swallow(guard._emergency, 124))
    emergency.start()
    assert gather_started.wait(5)

    # The main thread reaches its normal end while the emergency report is being gathered.
    result = guard.finish({"environment": {}, "notes": []}, 1)

    assert result is None  # the emergency path owns the report
    assert exited.is_set() and exits == [124]  # finish returned only after the emergency ended
    assert len(written) == 1 and written[0]["partial"] is True
    emergency.join(5)


def test_finish_then_emergency_is_a_no_op(guard_env, tmp_path):
    exits, _ = guard_env
    written: list[dict] = []
    session = FakeSession()
    guard = distributed.RankGuard(session, written.append, base_report=lambda: {"environment": {}, "notes": []})
    guard.wait_s = 0.1
    merged = guard.finish({"environment": {}, "notes": [], "profile": {}}, 0)
    assert merged is not None and merged["environment"]["ranks_merged"] == [0]
    guard.failure = {"how": "stalled", "seconds": 3.0, "time": time.time()}
    guard._emergency(124)  # the guard thread fires late: nothing is written twice
    assert exits == [] and written == []
    assert guard.finish({"environment": {}, "notes": []}, 0) is None  # a second finish too


def _swallow(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except SystemExit:
        pass


def test_stall_watchdog_fires_only_while_the_script_runs(guard_env, monkeypatch):
    """A rank whose script has ended (the main thread is on its way to report) is not stalled;
    the same silence inside the script is."""
    exits, exited = guard_env
    monkeypatch.setattr(distributed, "HEARTBEAT_S", 0.02)
    session = FakeSession()
    session.thresholds = {"distributed.wait_s": 0.1, "distributed.stall_s": 0.1}
    written: list[dict] = []
    guard = distributed.RankGuard(session, written.append, base_report=lambda: {"environment": {}, "notes": []}).start()
    try:
        time.sleep(0.5)  # no progress, but outside the script: silence
        assert exits == [] and guard.failure is None
        guard.run_script(exited.wait, 5)  # no progress inside the script: a stall
    finally:
        guard.close()
    assert exits == [124] and guard.failure["how"] == "stalled"
    assert guard.failure["in_torch"] is False  # blocked in our own wait, not in torch
    assert written and written[0]["environment"]["first_failure"]["how"] == "stalled"
