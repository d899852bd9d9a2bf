"""A small training script that resumes exactly with ``traindoctor.checkpoint``.

    python examples/resume/train.py --steps 40                 # trains, checkpoints every 5 steps
    python examples/resume/train.py --steps 40 --resume        # continues from ckpt/last.pt
    traindoctor verify-resume examples/resume/train.py --resume-args "--resume" --steps 20
    traindoctor ckpt inspect ckpt/last.pt

Everything a resumed run needs is saved: model, optimizer, LR scheduler, step, the RNGs (torch,
NumPy, Python) and the data position of the shuffling multi-worker loader, so a run stopped in
the middle of an epoch continues with exactly the batches it had not seen.
"""
import argparse
import random

import numpy as np
import torch
from torch.utils.data import TensorDataset

from traindoctor import checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
parser.add_argument("--ckpt", default="ckpt/last.pt")
parser.add_argument("--every", type=int, default=5, help="checkpoint every N steps")
parser.add_argument("--resume", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
random.seed(0)
np.random.seed(0)
inputs = torch.randn(256, 16)
targets = (inputs @ torch.randn(16, 1)).tanh()
loader = checkpoint.ResumableLoader(TensorDataset(inputs, targets), batch_size=32, shuffle=True,
                                    seed=0, num_workers=2)
model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                            torch.nn.Linear(64, 1))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)

step = 0
if args.resume:
    info = checkpoint.load(args.ckpt, model=model, optimizer=optimizer, scheduler=scheduler,
                           loader=loader)
    step = info.step
    print(f"resumed at step {step} (epoch {info.epoch}, {loader.batches_done} batches into it)")

while step < args.steps:
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        step += 1
        if step % args.every == 0:
            checkpoint.save(args.ckpt, model=model, optimizer=optimizer, scheduler=scheduler,
                            loader=loader, step=step, epoch=loader.epoch, keep_last=2)
            print(f"step {step}: loss {loss.item():.4f} (checkpoint saved)")
        if step >= args.steps:
            break
