"""The machine's cores and how busy other programs keep them (traindoctor.machine)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from traindoctor.machine import CpuSnapshot, cpu_snapshot, others_cores


def _proc(root: Path, busy: int, processes: dict[int, tuple[int, int]]) -> str:
    """A fake ``/proc``: the machine's busy ticks split over user/system, and pid -> (parent, ticks)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "stat").write_text(f"cpu  {busy - 10} 0 10 5000 7 0 0 3 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    for pid, (parent, ticks) in processes.items():
        (root / str(pid)).mkdir(exist_ok=True)
        # utime stime cutime cstime are fields 14-17; the name may hold spaces and parentheses
        fields = ["S", str(parent)] + ["0"] * 9 + [str(ticks), "0", "0", "0"] + ["0"] * 5
        (root / str(pid) / "stat").write_text(f"{pid} (a (b) c) " + " ".join(fields) + "\n")
    (root / "self").mkdir(exist_ok=True)  # not a pid: skipped
    return str(root)


def test_others_are_the_machines_busy_time_less_this_process_tree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("traindoctor.machine._clock_ticks", lambda: 100.0)
    clock = iter([10.0, 12.0])
    monkeypatch.setattr("time.monotonic", lambda: next(clock))
    # 7 (us) -> 8 (a trial process) -> 9 (its loader worker); 20 is another program
    before = cpu_snapshot(7, _proc(tmp_path / "a", 1000, {7: (1, 50), 8: (7, 0), 9: (8, 0), 20: (1, 400)}))
    # 2 s later: the tree used 100 + 150 ticks (2.5 s); the machine 700 ticks (7 s) in all
    after = cpu_snapshot(7, _proc(tmp_path / "b", 1700, {7: (1, 50), 8: (7, 100), 9: (8, 150), 20: (1, 850)}))
    assert before is not None and after is not None
    assert after.own_s - before.own_s == pytest.approx(2.5)
    assert others_cores(before, after) == pytest.approx((7.0 - 2.5) / 2.0)


def test_a_child_that_ended_counts_through_its_parents_children_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("traindoctor.machine._clock_ticks", lambda: 100.0)
    # the trial process 8 had 30 ticks; it ended and was reaped: its 90 ticks are 7's cutime now
    before = _proc(tmp_path / "a", 1000, {7: (1, 0), 8: (7, 30)})
    after = _proc(tmp_path / "b", 1090, {7: (1, 90)})
    a = cpu_snapshot(7, before)
    b = cpu_snapshot(7, after)
    assert a is not None and b is not None
    assert b.own_s - a.own_s == pytest.approx(0.6)  # 60 ticks ran in between, all of them ours


def test_unknown_where_proc_cannot_tell(tmp_path: Path) -> None:
    assert cpu_snapshot(7, str(tmp_path / "none")) is None
    assert cpu_snapshot(99, _proc(tmp_path / "p", 1000, {7: (1, 0)})) is None  # no such process
    assert others_cores(None, CpuSnapshot(1.0, 1.0, 1.0)) is None
    assert others_cores(CpuSnapshot(1.0, 1.0, 1.0), CpuSnapshot(1.1, 9.0, 1.0)) is None  # too short to tell


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="Linux /proc only")
def test_a_busy_child_of_ours_is_not_counted_as_other_programs() -> None:
    before = cpu_snapshot()
    code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass"
    subprocess.run([sys.executable, "-c", code], check=True)
    after = cpu_snapshot()
    assert before is not None and after is not None
    assert after.own_s - before.own_s >= 0.55  # the child's CPU time is ours
    others = others_cores(before, after)
    assert others is not None and others >= 0.0
