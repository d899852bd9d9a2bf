"""The per-step hot path reads clocks and /proc sparingly.

Inside a training step a system call costs about ten times what it costs in a tight loop (the
kernel entry evicts the step's cached state: two ``thread_time`` reads per batch added 17 us per
step to a 1 ms CPU step, two ``pread`` of ``/proc/self/statm`` 20 us). So ``next()``'s CPU time is
read for a sample of the batches and memory at most every ``MEMORY_INTERVAL_S``; these tests pin
the sampling and check that what is computed from the samples stays right.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import pytest
import torch
from helpers.data_loops import SleepyDataset, train
from torch.utils.data import DataLoader, Dataset

import traindoctor
from traindoctor.runtime import timeline
from traindoctor.runtime.probes.dataloader import CPU_SAMPLE_EVERY
from traindoctor.runtime.step_timer import StepRecord
from traindoctor.runtime.timeline import MemorySampler, RssReader


class BusyDataset(Dataset):
    """Each ``__getitem__`` spins the CPU for ``busy_s`` (decoding in the main process)."""

    def __init__(self, size: int, busy_s: float) -> None:
        self.x = torch.randn(size, 8)
        self.y = torch.randn(size, 1)
        self.busy_s = busy_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        end = time.thread_time() + self.busy_s
        while time.thread_time() < end:
            pass
        return self.x[i], self.y[i]


def _loader_info(doctor: Any) -> Any:
    (info,) = doctor.loaders
    return info


def test_cpu_time_of_next_is_read_for_every_eighth_batch() -> None:
    batches = 40
    with traindoctor.watch() as doctor:
        train(DataLoader(BusyDataset(4 * batches, busy_s=0.0005), batch_size=4))
    info = _loader_info(doctor)
    assert info.batches == batches
    assert info.cpu_batches == len(range(0, batches, CPU_SAMPLE_EVERY)) == 5  # 1st, 9th, ... 33rd
    # A CPU-bound dataset: the sampled batches' CPU time per batch is about their wait per batch
    # (4 items x 0.5 ms of spinning), so the pipeline model still sees a CPU-bound loader.
    assert info.wait_cpu_s / info.cpu_batches >= 4 * 0.0005 * 0.9


def test_a_sleeping_dataset_still_shows_little_cpu_per_batch() -> None:
    with traindoctor.watch() as doctor:
        train(DataLoader(SleepyDataset(size=48, delay_s=0.002), batch_size=4))
    info = _loader_info(doctor)
    assert info.cpu_batches == 2  # the 1st and 9th of 12
    per_batch_wait = info.wait_s / info.batches
    assert info.wait_cpu_s / info.cpu_batches < 0.3 * per_batch_wait


def test_worker_loaders_read_no_cpu_time() -> None:
    """A worker's CPU is not seen from the training thread: nothing to sample."""
    with traindoctor.watch() as doctor:
        train(DataLoader(SleepyDataset(size=32), batch_size=4, num_workers=1))
    info = _loader_info(doctor)
    assert info.batches == 8 and info.cpu_batches == 0 and info.wait_cpu_s == 0.0


def _steps(n: int, step_s: float) -> list[StepRecord]:
    return [StepRecord(i + 1, i * step_s, (i + 1) * step_s, 0.0, 0.0, 0.0, 1, 8, 1) for i in range(n)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_memory_is_sampled_at_most_every_interval() -> None:
    sampler = MemorySampler(interval_s=1.0)
    for record in _steps(48, step_s=0.125):  # 8 steps to the interval: one sample per 8 steps
        sampler(record)
    assert [s["step"] for s in sampler.samples] == [1, 9, 17, 25, 33, 41]
    slow = MemorySampler(interval_s=1.0)
    for record in _steps(20, step_s=1.5):  # steps longer than the interval: every step
        slow(record)
    assert [s["step"] for s in slow.samples] == list(range(1, 21))


@pytest.mark.skipif(not hasattr(os, "fork") or not sys.platform.startswith("linux"), reason="fork and /proc")
def test_a_forked_child_reads_its_own_memory() -> None:
    """The reader keeps ``/proc/self/statm`` open, and ``/proc/self`` names the process that
    opened it: after a fork the child must reopen it (told by the at-fork hook, not getpid())."""
    reader = RssReader()
    assert reader() is not None
    generation = timeline._fork_generation
    pid = os.fork()
    if pid == 0:  # the child: grow by 64 MiB and see it
        ok = False
        try:
            before = reader()
            ballast = b"x" * (64 << 20)
            after = reader()
            ok = (
                timeline._fork_generation == generation + 1
                and before is not None
                and after is not None
                and after - before >= 60 << 20
                and len(ballast) > 0
            )
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    reader.close()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
