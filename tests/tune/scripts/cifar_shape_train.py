"""The shape of bearpaw's cifar.py, tiny: a per-sample CPU transform, more train-loader workers
than cores without persistent workers, and a test loader with workers re-created every epoch."""

import argparse
import os

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

WORKERS = len(os.sched_getaffinity(0)) + 2  # more processes than cores, as `--workers 4` on 2 cores


class Images(Dataset):
    """Random 3x16x16 images, normalised per sample (the CPU work of a torchvision transform)."""

    def __init__(self, n: int) -> None:
        self.x = torch.randn(n, 3, 16, 16, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        image = self.x[i]
        for _ in range(10):
            image = (image - image.mean()) / (image.std() + 1e-6)
        return image, i % 10


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    train_set, test_set = Images(64), Images(16)
    train_loader = DataLoader(train_set, batch_size=8, shuffle=True, num_workers=WORKERS)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(args.epochs):
        for x, y in train_loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        test_loader = DataLoader(test_set, batch_size=16, num_workers=WORKERS)  # re-created per epoch
        with torch.no_grad():
            for x, _ in test_loader:
                model(x)
    print("finished")
