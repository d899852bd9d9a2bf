"""Saves model and optimizer but not the GradScaler: the loss scale restarts on resume."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--resume", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
X = torch.randn(64, 8)
Y = X @ torch.randn(8, 1)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=2)
step = 0
if args.resume:
    state = torch.load("ckpt.pt", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    step = state["step"]
while step < 12:
    i = (step * 8) % 64
    loss = torch.nn.functional.mse_loss(model(X[i : i + 8]), Y[i : i + 8])
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    step += 1
    if step % 3 == 0:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, "ckpt.pt")
