"""benchmarks/runtime_overhead.py: the whole-process split (until training, training, after it)
comes from marks the benchmark loop itself writes, and adds up to the child's CPU time."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from benchmark_scripts import benchmark_module


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("runtime_overhead") as module:
        yield module


def test_loop_marks_training_and_the_split_adds_up(tmp_path: Path, bench) -> None:
    (tmp_path / "loop.py").write_text(bench.LOOP.replace("WIDTH", "8"))
    env = bench._env()
    wall, cpu, split = bench._child_times([sys.executable, "loop.py", "3"], str(tmp_path), env)
    assert split is not None
    until, training, after = split
    assert until > 0.05  # the interpreter and `import torch` ran before training
    assert training > 0 and after >= 0
    assert until + training + after == pytest.approx(cpu)
    assert cpu <= wall * os.cpu_count() + 0.1


def test_a_script_without_marks_has_no_split(tmp_path: Path, bench) -> None:
    (tmp_path / "other.py").write_text("print('no marks')\n")
    _wall, _cpu, split = bench._child_times([sys.executable, "other.py"], str(tmp_path), bench._env())
    assert split is None
    # a stale marks file from an earlier run is not read for this one
    (tmp_path / "segments.txt").write_text("1.0 2.0\n")
    assert bench._child_times([sys.executable, "other.py"], str(tmp_path), bench._env())[2] is None


def test_mean_ci_uses_students_t(bench) -> None:
    mean, half = bench.mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert half == pytest.approx(4.303 * 1.0 / 3**0.5)


def test_layout_options_set_the_same_environment_for_both_sides(bench, monkeypatch) -> None:
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    monkeypatch.delenv("THP_MEM_ALLOC_ENABLE", raising=False)
    plain = bench._env()
    assert "GLIBC_TUNABLES" not in plain and "THP_MEM_ALLOC_ENABLE" not in plain
    env = bench._env(fixed_heap=True, huge_pages=True)
    assert env["GLIBC_TUNABLES"] == bench.FIXED_HEAP
    assert env["THP_MEM_ALLOC_ENABLE"] == "1"
    assert env["OMP_NUM_THREADS"] == "1"


def test_a_huge_page_child_gets_the_setting(tmp_path: Path, bench) -> None:
    # what torch reads at allocation time reaches the child process
    (tmp_path / "show.py").write_text(
        "import os\nopen('seen.txt', 'w').write(os.environ.get('THP_MEM_ALLOC_ENABLE', '-'))\n"
    )
    bench._child_times([sys.executable, "show.py"], str(tmp_path), bench._env(huge_pages=True))
    assert (tmp_path / "seen.txt").read_text() == "1"
