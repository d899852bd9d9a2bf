"""Uses traindoctor.checkpoint: resumes bit-exactly, even mid-epoch with a shuffling loader
with worker processes, dropout, NumPy and Python random draws, and an LR schedule."""

import argparse
import random

import numpy as np
import torch
from torch.utils.data import TensorDataset

from traindoctor import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=14)
parser.add_argument("--ckpt", default="ckpt.pt")
parser.add_argument("--workers", type=int, default=2)
parser.add_argument("--resume", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
random.seed(0)
np.random.seed(0)
X = torch.randn(40, 8)
Y = X @ torch.randn(8, 1)
loader = checkpoint.ResumableLoader(TensorDataset(X, Y), batch_size=8, shuffle=True, seed=1, num_workers=args.workers)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)
step = 0
if args.resume:
    info = checkpoint.load(args.ckpt, model=model, optimizer=optimizer, scheduler=scheduler, loader=loader)
    step = info.step
while step < args.steps:
    for x, y in loader:
        noise = torch.from_numpy(np.random.randn(*x.shape).astype("float32"))
        x = x + 0.01 * random.random() * noise
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        if step % 3 == 0:
            checkpoint.save(
                args.ckpt,
                model=model,
                optimizer=optimizer,
                scheduler=scheduler,
                loader=loader,
                step=step,
                epoch=loader.epoch,
            )
        if step >= args.steps:
            break
