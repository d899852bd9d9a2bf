"""Mixed precision with gradient accumulation: fp16 pitfalls and a checkpoint that cannot resume."""

import os

import torch
import torch.nn as nn
from torch.cuda.amp import GradScaler, autocast
from torch.utils.data import DataLoader, TensorDataset

ACCUM_STEPS = 8
BATCH = 4

model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU(), nn.Flatten(), nn.LazyLinear(10)).cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
scaler = GradScaler()
data = TensorDataset(torch.randn(256, 3, 32, 32), torch.randint(0, 10, (256,)))
loader = DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=4)


def train_epoch():
    for i, (x, y) in enumerate(loader):
        x, y = x.cuda(), y.cuda()
        with autocast():
            loss = nn.functional.cross_entropy(model(x), y) / ACCUM_STEPS
        scaler.scale(loss).backward()
        if (i + 1) % ACCUM_STEPS == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()


def evaluate(val_loader):
    correct = 0
    with torch.no_grad():
        for x, y in val_loader:
            correct += (model(x.cuda()).argmax(1) == y.cuda()).sum().item()
    return correct


start = 0
if os.path.exists("last.pt"):
    state = torch.load("last.pt", weights_only=False)
    model.load_state_dict(state["model"])
    start = state["epoch"] + 1

for epoch in range(start, 10):
    train_epoch()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, "last.pt")
