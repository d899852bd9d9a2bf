"""A tiny training script for `traindoctor tune SCRIPT` tests: a sleepy dataset (loading is the
bottleneck), a checkpoint and a log written next to it, and a line printed when it finishes."""

import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Sleepy(Dataset):
    def __init__(self, n: int, delay_s: float) -> None:
        self.x = torch.randn(n, 8, generator=torch.Generator().manual_seed(0))
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        time.sleep(self.delay_s)
        return self.x[i], self.x[i].sum(0, keepdim=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=1.0)
    parser.add_argument("--ckpt", default="ckpt.pt")
    args = parser.parse_args()
    loader = DataLoader(Sleepy(256, args.delay_ms / 1000), batch_size=8, shuffle=True)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    os.makedirs("outputs", exist_ok=True)
    step = 0
    for _ in range(args.epochs):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % 5 == 0:
                torch.save({"model": model.state_dict(), "step": step}, args.ckpt)
                with open("outputs/train.log", "a") as fh:
                    fh.write(f"step {step} loss {loss.item():.4f}\n")
    print(f"finished after {step} steps")


if __name__ == "__main__":
    main()
