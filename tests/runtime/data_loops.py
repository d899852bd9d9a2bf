"""Tiny real training loops for the runtime tests (CPU, a second or less each).

The data wait is made real with datasets whose ``__getitem__`` sleeps: sleeping needs no CPU, so
the measured shares stay stable on a loaded two-core machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SleepyDataset(Dataset):
    """``size`` samples of 8 features; each ``__getitem__`` sleeps ``delay_s`` (decoding)."""

    def __init__(self, size: int = 32, delay_s: float = 0.0, features: int = 8) -> None:
        gen = torch.Generator().manual_seed(1)
        self.x = torch.randn(size, features, generator=gen)
        self.y = torch.randn(size, 1, generator=gen)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.x[i], self.y[i]


def slow_worker_start(worker_id: int) -> None:
    """A worker_init_fn with a visible start-up cost (opening files, loading an index...)."""
    time.sleep(0.15)


def make_model(features: int = 8) -> nn.Module:
    return nn.Sequential(nn.Linear(features, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 1))


def train(
    loader: DataLoader,
    *,
    epochs: int = 1,
    step_sleep_s: float = 0.0,
    accumulation: int = 1,
    on_batch: Callable[[Any], None] | None = None,
    seed: int = 0,
) -> tuple[nn.Module, list[float]]:
    """A real SGD loop; ``step_sleep_s`` stands in for a heavier model's compute."""
    torch.manual_seed(seed)
    model = make_model(loader.dataset.x.shape[1])  # type: ignore[attr-defined]
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses: list[float] = []
    for _ in range(epochs):
        for i, (x, y) in enumerate(loader):
            if on_batch is not None:
                on_batch(x)
            loss = nn.functional.mse_loss(model(x), y) / accumulation
            loss.backward()
            if step_sleep_s:
                time.sleep(step_sleep_s)
            if (i + 1) % accumulation == 0:
                opt.step()
                opt.zero_grad()
            losses.append(loss.item())
    return model, losses


def codes(doctor: Any) -> list[str]:
    return [f.code for f in doctor.findings]


def finding(doctor: Any, code: str) -> Any:
    matches = [f for f in doctor.findings if f.code == code]
    assert len(matches) == 1, (code, doctor.findings, doctor.notes)
    return matches[0]
