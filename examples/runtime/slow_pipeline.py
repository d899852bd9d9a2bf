"""A training loop whose input pipeline is the bottleneck (for ``traindoctor run``).

Each sample takes ~3 ms to "decode" (a sleep standing in for JPEG decoding / augmentation) and
the DataLoader runs in the main process (``num_workers=0``), so the model waits for data most
of the time. ``traindoctor run examples/runtime/slow_pipeline.py`` reports TD102 with the measured
data-wait share and a recommended worker count. Runs in a few seconds on a CPU.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class SlowDecodeDataset(Dataset):
    """Random images whose ``__getitem__`` pays a fixed decoding cost."""

    def __init__(self, size: int = 192, decode_s: float = 0.003) -> None:
        generator = torch.Generator().manual_seed(0)
        self.images = torch.randn(size, 3, 16, 16, generator=generator)
        self.labels = torch.randint(0, 10, (size,), generator=generator)
        self.decode_s = decode_s

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.decode_s:
            time.sleep(self.decode_s)  # stands in for decoding and augmentation
        return self.images[index], self.labels[index]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--decode-ms", type=float, default=3.0, help="decoding cost per sample")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    dataset = SlowDecodeDataset(decode_s=args.decode_ms / 1000.0)
    loader = DataLoader(
        dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers,
        persistent_workers=args.num_workers > 0,
    )
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(args.epochs):
        total = 0.0
        for images, labels in loader:
            loss = nn.functional.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch}: mean loss {total / len(loader):.4f}")


if __name__ == "__main__":
    main()
