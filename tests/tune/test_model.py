"""The pipeline model behind TD102/TD105's worker counts and tune's search (no torch needed)."""

from __future__ import annotations

import pytest

from traindoctor.facts.data.pipeline import Bounds, Pipeline, recommend, worker_ceiling


def test_sleepy_loading_on_two_cores_wants_more_workers_than_cores() -> None:
    # examples/runtime/slow_pipeline.py: 16 samples x 3 ms of sleep, a tiny model, 2 cores. The
    # workers mostly wait, so more of them than cores fit: up to two per core.
    pipe = Pipeline(fetch_s=0.048, fetch_cpu_s=0.001, compute_s=0.003, cores=2, threads=2)
    assert pipe.rate(1) < pipe.rate(0) * 1.15  # one worker barely beats the main process
    assert pipe.rate(2) == pytest.approx(2 / 0.048)
    assert pipe.ceiling == 4
    advice = recommend(pipe, current=0)
    assert advice.workers == 4
    assert advice.speedup == pytest.approx((4 / 0.048) * 0.051, rel=1e-6)
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


def test_the_ceiling_follows_what_the_training_process_leaves_free() -> None:
    # busy workers (decoding), 4 cores: a loop that mostly waits for data leaves every core to
    # the workers; one that computes as long as a worker loads keeps half of them
    waiting = Pipeline(fetch_s=0.040, fetch_cpu_s=0.040, compute_s=0.004, cores=4, threads=1)
    assert waiting.trainer_share == pytest.approx(0.004 / 0.044)
    assert waiting.ceiling == 4
    even = Pipeline(fetch_s=0.040, fetch_cpu_s=0.040, compute_s=0.040, cores=4, threads=1)
    assert even.ceiling == 2
    # two intra-op threads double the training process's CPU per batch
    assert Pipeline(fetch_s=0.040, fetch_cpu_s=0.040, compute_s=0.020, cores=4, threads=2).ceiling == 2
    # unknown loading CPU counts as busy workers; an unknown split keeps a core for the training
    assert worker_ceiling(4) == 3
    assert worker_ceiling(4, busy=None, trainer_share=0.02) == 4
    # workers that mostly wait outnumber the cores, two per core at most; never fewer than one
    assert worker_ceiling(2, busy=0.3, trainer_share=0.1) == 2 * 2
    assert worker_ceiling(2, busy=0.6, trainer_share=0.1) == 2
    assert worker_ceiling(1, busy=1.0, trainer_share=0.9) == 1


def test_the_bounds_give_tune_the_same_ceiling_per_thread_count() -> None:
    # 8 ms of CPU to load a sample in the main process, the loop alone 2 ms per sample with one
    # thread, 4 ms of CPU with two (spinning): on 2 cores busy workers get 1.6 cores or 1.33
    bounds = Bounds(
        loader={0: 125.0, 1: 120.0, 2: 230.0},
        compute={1: 500.0, 2: 520.0},
        loader_cpu=0.008,
        compute_cpu={1: 0.002, 2: 0.004},
        cores=2,
    )
    assert bounds.worker_busy == pytest.approx(1.0)
    assert bounds.trainer_share(1) == pytest.approx(0.2)
    assert bounds.ceiling(1, bounds.worker_busy) == 2
    assert bounds.ceiling(2, bounds.worker_busy) == 1
    # the runtime's model of the same pipeline per batch of 8 samples gives the same numbers
    run = Pipeline(fetch_s=0.064, fetch_cpu_s=0.064, compute_s=0.016, cores=2, threads=1)
    assert run.ceiling == bounds.ceiling(1, bounds.worker_busy)


def test_the_prediction_is_a_range_on_a_busy_machine() -> None:
    # vae's shape: 11 ms to load a batch in the main process (CPU-bound), 16.6 ms to train on it,
    # 2 cores, 2 intra-op threads; other programs kept 1.5 cores busy during the run
    idle = Pipeline(fetch_s=0.011, fetch_cpu_s=0.011, compute_s=0.0166, cores=2, threads=1)
    busy = Pipeline(fetch_s=0.011, fetch_cpu_s=0.011, compute_s=0.0166, cores=2, threads=1, busy_elsewhere=1.5)
    quiet = recommend(idle, current=0)
    assert quiet.workers == 1 and quiet.low_speedup is None
    assert quiet.speedup_text() == f"{quiet.speedup:.1f}x"
    advice = recommend(busy, current=0)
    assert advice.workers == 1
    low, high = advice.speedup_range
    assert high == pytest.approx(quiet.speedup) and high > 1.5
    # one core left: loading and training take turns on it, as without a worker
    assert low == pytest.approx(1.0)
    assert advice.speedup_text() == f"1.0-{high:.1f}x"
    assert "load 1.5 beyond this run's own on 2 cores): on the 1 core they left free the gain would be 1.00x" in (
        advice.uncertain
    )
