"""The pipeline model behind TD102/TD105's worker counts and tune's search (no torch needed)."""

from __future__ import annotations

import pytest

from traindoctor.facts.data.pipeline import Pipeline, recommend


def test_sleepy_loading_on_two_cores_wants_two_workers_not_one() -> None:
    # examples/runtime/slow_pipeline.py: 16 samples x 3 ms of sleep, a tiny model, 2 cores
    pipe = Pipeline(fetch_s=0.048, fetch_cpu_s=0.001, compute_s=0.003, cores=2, threads=2)
    assert pipe.rate(1) < pipe.rate(0) * 1.15  # one worker barely beats the main process
    assert pipe.rate(2) == pytest.approx(2 / 0.048)
    advice = recommend(pipe, current=0)
    assert advice.workers == 2
    assert advice.speedup == pytest.approx((2 / 0.048) * 0.051, rel=1e-6)
    assert advice.uncertain == ""


def test_cheap_in_memory_batches_keep_the_main_process() -> None:
    pipe = Pipeline(fetch_s=0.0005, fetch_cpu_s=0.0005, compute_s=0.005, cores=8, threads=8)
    assert recommend(pipe, current=0).workers == 0


def test_cpu_bound_loading_on_one_core_gets_no_workers() -> None:
    pipe = Pipeline(fetch_s=0.040, fetch_cpu_s=0.040, compute_s=0.010, cores=1, threads=1)
    assert recommend(pipe, current=0).workers == 0


def test_cpu_bound_loading_competes_with_the_training_threads() -> None:
    pipe = Pipeline(fetch_s=0.040, fetch_cpu_s=0.040, compute_s=0.010, cores=4, threads=4)
    # 4 cores / (40 ms of loading + 4 threads x 10 ms of compute) = 50 batches/s at most
    assert pipe.rate(4) == pytest.approx(4 / 0.080)
    advice = recommend(pipe, current=0)
    assert 0 < advice.workers < 4
    assert "intra-op thread" in advice.uncertain


def test_unknown_loading_cpu_is_pessimistic_and_says_so() -> None:
    pipe = Pipeline(fetch_s=0.040, compute_s=0.010, cores=4, threads=1)
    advice = recommend(pipe, current=2)
    assert "not measured" in advice.uncertain
