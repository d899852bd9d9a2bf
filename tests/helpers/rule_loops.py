"""Tiny models, loops and helpers for the runtime rule tests (TD2xx-TD7xx): CPU, milliseconds per step."""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from traindoctor.runtime.device import DeviceInfo
from traindoctor.runtime.probes.modules import module_stats

FAKE_A100 = DeviceInfo(
    type="cuda",
    name="Fake A100",
    capability=(8, 0),
    bf16_supported=True,
    cuda_available=True,
    total_memory=80 * 2**30,
    device_count=1,
)
FAKE_V100 = DeviceInfo(
    type="cuda",
    name="Fake V100",
    capability=(7, 0),
    bf16_supported=False,
    cuda_available=True,
    total_memory=16 * 2**30,
    device_count=1,
)


def codes(doctor: Any) -> list[str]:
    return sorted(f.code for f in doctor.findings)


def finding(doctor: Any, code: str) -> Any:
    found = [f for f in doctor.findings if f.code == code]
    assert len(found) == 1, (code, [(f.code, f.message) for f in doctor.findings], doctor.notes)
    return found[0]


def line_of(marker: str, obj: Any = None) -> int:
    """The line number of the (first) line containing ``marker`` in the caller's file."""
    filename = inspect.getsourcefile(obj) if obj is not None else inspect.stack()[1].filename
    with open(filename, encoding="utf-8") as fh:
        for i, line in enumerate(fh, 1):
            if marker in line and "line_of(" not in line:
                return i
    raise AssertionError(f"marker {marker!r} not found in {filename}")


def conv_bn_net(seed: int = 0, p: float = 0.2) -> nn.Module:
    """Conv -> BatchNorm -> ReLU -> pool -> Dropout -> Linear, for 3x8x8 inputs, 2 classes."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(p),
        nn.Linear(4, 2),
    )


def mlp(seed: int = 0, features: int = 8, norm: bool = True) -> nn.Module:
    torch.manual_seed(seed)
    layers: list[nn.Module] = [nn.Linear(features, 16)]
    if norm:
        layers.append(nn.LayerNorm(16))
    layers += [nn.ReLU(), nn.Linear(16, 2)]
    return nn.Sequential(*layers)


def images(batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, 8, 8, generator=gen), torch.randint(0, 2, (batch,), generator=gen)


def vectors(batch: int, seed: int = 0, features: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(batch, features, generator=gen), torch.randint(0, 2, (batch,), generator=gen)


def train_steps(
    model: nn.Module, optimizer: Any, *, steps: int = 3, batch: int = 8, accumulation: int = 1, data: Any = images
) -> None:
    """Plain fp32 training steps (``accumulation`` backward calls per optimizer step)."""
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    for step in range(steps):
        for micro in range(accumulation):
            x, y = data(batch, seed=step * accumulation + micro)
            loss_fn(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()


def vector_loader(batch: int, samples: int | None = None, features: int = 8) -> DataLoader:
    """``samples`` (3 batches by default) random vectors with 2 classes, in batches of ``batch``."""
    n = samples or batch * 3
    gen = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(n, features, generator=gen), torch.randint(0, 2, (n,), generator=gen))
    return DataLoader(data, batch_size=batch)


def train_epoch(model: nn.Module, opt: torch.optim.Optimizer, loader: DataLoader, sched: Any = None) -> None:
    """One pass over ``loader``, an optimizer step (and a scheduler step) per batch."""
    for x, y in loader:
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()


def model_and_momentum_sgd() -> tuple[nn.Module, torch.optim.Optimizer]:
    """A fresh :func:`conv_bn_net` and SGD with momentum over it (its state is worth saving)."""
    model = conv_bn_net()
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def cuda_conv_run(doctor: Any, shapes: list[tuple[int, ...]]) -> None:
    """Real CPU steps, plus one replayed CUDA conv forward per shape."""
    doctor.uses_cuda = True  # what a CUDA run reports
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    train_steps(model, opt, steps=2)
    assert doctor.notes == []  # the CUDA step clock stays out of the way on a CPU build
    stats = module_stats(doctor)
    for shape in shapes:
        stats.record(model[0], "conv", shape, "cuda", True, True)
