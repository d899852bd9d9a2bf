"""TD107 threads-oversubscribed: intra-op threads + loader workers beyond the usable cores, judged
on real CPU loops (the usable cores set by ``watch(cpu_count=...)``, the contention's signature,
slow steps among fast ones, made by a model whose forward sometimes waits)."""

from __future__ import annotations

import os
import time

import pytest
import torch
from helpers.rule_loops import codes, finding, line_of
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import traindoctor
from traindoctor.facts.data.runtime import compute_spread
from traindoctor.runtime.step_timer import StepRecord


class Stalling(nn.Module):
    """A layer whose forward takes 3 ms and every fourth one 30 ms, as a thread stalls whose core
    a worker took in the middle of an operation."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 1)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        time.sleep(0.03 if self.calls % 4 == 0 else 0.003)
        return self.fc(x)


@pytest.fixture()
def threads(monkeypatch):
    """The intra-op threads, restored afterwards; the machine reads as quiet (a busy one is judged
    apart: :func:`test_a_machine_busy_with_other_programs_is_not_judged`): other programs' CPU
    use unknown (the load average decides) and the load average 0."""
    monkeypatch.setattr("traindoctor.facts.data.runtime.others_cores", lambda before, after: None)
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    before = torch.get_num_threads()
    yield torch.set_num_threads
    torch.set_num_threads(before)


def _run(threads_n: int, workers: int, cores: int, model: nn.Module | None = None):
    torch.manual_seed(0)
    torch.set_num_threads(threads_n)
    model = model or Stalling()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ds = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    with traindoctor.watch(select=["TD107", "TD104"], cpu_count=cores, machine_cores=cores) as doctor:
        loader = DataLoader(ds, batch_size=8, num_workers=workers)  # LOADER
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return doctor


def test_threads_plus_a_worker_beyond_the_cores_with_uneven_steps_is_reported(threads):
    doctor = _run(threads_n=2, workers=1, cores=2)
    assert codes(doctor) == ["TD107"]
    f = finding(doctor, "TD107")
    ev = f.evidence
    assert (ev["intra_op_threads"], ev["concurrent_workers"], ev["usable_cores"]) == (2, 1, 2)
    assert ev["compute_ms_p90"] >= 30 > ev["compute_ms_median"] >= 3
    assert ev["recommended_threads"] == 1
    assert "call `torch.set_num_threads(1)`" in f.message
    assert f.location.row == line_of("# LOADER", _run)


def test_a_machine_busy_with_other_programs_is_not_judged(threads, monkeypatch):
    # the same oversubscribed, uneven run, while the machine's load is 2 beyond its own 3 threads
    monkeypatch.setattr(os, "getloadavg", lambda: (5.0, 5.0, 5.0))
    assert codes(_run(threads_n=2, workers=1, cores=2)) == []
    # quiet before the run, 3.5 at its end: 0.5 beyond its own threads and worker, judged
    loads = iter([0.0] + [3.5] * 100)
    monkeypatch.setattr(os, "getloadavg", lambda: (next(loads),) * 3)
    assert codes(_run(threads_n=2, workers=1, cores=2)) == ["TD107"]


def test_other_programs_cpu_use_during_the_run_decides_where_measured(threads, monkeypatch):
    # measured (Linux /proc): the machine's CPU time less this process tree's, whatever the load
    # average says (it counts the run's own threads and moves over a minute)
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    seen = []

    def others(before, after):
        seen.append((before, after))
        return 0.2

    monkeypatch.setattr("traindoctor.facts.data.runtime.others_cores", others)
    assert codes(_run(threads_n=2, workers=1, cores=2)) == ["TD107"]
    assert seen and seen[0][0] is not None  # the snapshot taken when the watch started
    monkeypatch.setattr("traindoctor.facts.data.runtime.others_cores", lambda before, after: 1.2)
    assert codes(_run(threads_n=2, workers=1, cores=2)) == []  # another program kept a core busy


def test_a_machine_busy_before_the_run_started_is_not_judged(threads, monkeypatch):
    # a short run barely moves the 1-minute average: at its end the load (3.3) is below this
    # run's own 3 threads + worker count, yet it was 2.5 before the run began (other programs)
    loads = iter([2.5] + [3.3] * 100)
    monkeypatch.setattr(os, "getloadavg", lambda: (next(loads),) * 3)
    assert codes(_run(threads_n=2, workers=1, cores=2)) == []


def test_threads_that_leave_the_worker_its_core_are_silent(threads):
    assert codes(_run(threads_n=1, workers=1, cores=2)) == []


def test_steps_too_short_to_tell_contention_from_noise_are_silent(threads):
    class Quick(Stalling):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            if self.calls % 4 == 0:
                time.sleep(0.01)
            return self.fc(x)

    assert codes(_run(threads_n=2, workers=1, cores=2, model=Quick())) == []  # median well under 2 ms


def test_no_worker_beside_the_threads_is_silent(threads):
    assert codes(_run(threads_n=2, workers=0, cores=2)) == []


def test_workers_alone_beyond_the_cores_are_td104_not_td107(threads):
    assert codes(_run(threads_n=2, workers=2, cores=1)) == ["TD104"]


def _records(compute_ms: list[float], samples: list[int] | None = None) -> list[StepRecord]:
    out = []
    t = 0.0
    for i, ms in enumerate(compute_ms):
        record = StepRecord(
            index=i + 1,
            start=t,
            end=t + ms / 1000,
            data_s=0.0,
            transfer_s=0.0,
            optimizer_s=0.0,
            batches=1,
            samples=samples[i] if samples else 8,
            backward_calls=1,
            forward_s=ms / 2000,
            backward_s=ms / 2000,
        )
        out.append(record)
        t += ms / 1000
    return out


class _Session:
    def __init__(self, records: list[StepRecord]) -> None:
        self.records = records


def test_compute_spread_leaves_warm_up_out_and_needs_ten_steady_steps():
    assert compute_spread(_Session(_records([5.0] * 10))) is None  # 1 warm-up step: 9 steady
    # 20 steps: 2 warm-up steps (10%) left out, whatever they took
    median, p90, n = compute_spread(_Session(_records([500.0, 500.0] + [5.0] * 16 + [20.0, 20.0])))
    assert n == 18 and median == pytest.approx(0.005) and p90 == pytest.approx(0.02)


def test_compute_spread_compares_steps_of_the_usual_batch_size_only():
    # an epoch's short last batch (2 samples) took long: other work, not contention
    ms = [5.0, 5.0] + [5.0] * 16 + [40.0, 40.0]
    spread = compute_spread(_Session(_records(ms, samples=[8] * 18 + [2, 2])))
    assert spread is not None and spread[2] == 16 and spread[1] == pytest.approx(0.005)
