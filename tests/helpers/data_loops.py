"""Tiny real training loops for the runtime tests (CPU, a second or less each), and a trainer that
evaluates on a fresh loader every few iterations (minGPT's adder project).

The data wait is made real with datasets whose ``__getitem__`` sleeps: sleeping needs no CPU, so
the measured shares stay stable on a loaded two-core machine.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


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


class MiniTrainer:
    """A trainer that owns the training loader and calls back after every iteration."""

    def __init__(self, model: nn.Module, train_set, callback, iters: int, workers: int = 0) -> None:
        self.model, self.callback, self.iters = model, callback, iters
        self.loader = DataLoader(train_set, batch_size=8, shuffle=True, num_workers=workers)
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        self.iter_num = 0

    def run(self) -> None:
        it = iter(self.loader)
        while self.iter_num < self.iters:
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(self.loader)
                x, y = next(it)
            loss = nn.functional.mse_loss(self.model(x), y)
            self.model.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            self.callback(self)
            self.iter_num += 1


def fast_dataset() -> TensorDataset:
    """64 in-memory samples: batches that cost nothing to load."""
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g))


def evaluate_fresh_loader(model: nn.Module, delay_s: float, max_batches: int | None, workers: int = 0) -> float:
    """Evaluate under ``no_grad`` on a new sleepy loader (whole, or its first ``max_batches``)."""
    loader = DataLoader(SleepyDataset(48, delay_s=delay_s), batch_size=4, num_workers=workers)  # eval
    total = 0.0
    with torch.no_grad():
        for b, (x, y) in enumerate(loader):
            total += nn.functional.mse_loss(model(x), y).item()
            if max_batches is not None and b + 1 >= max_batches:
                break
    return total
