"""Saves only the model weights (and the step): the optimizer's momentum is lost on resume."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--ckpt", default="ckpt.pt")
parser.add_argument("--resume", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
X = torch.randn(64, 8)
Y = X @ torch.randn(8, 1) + 0.1 * torch.randn(64, 1)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
step = 0
if args.resume:
    state = torch.load(args.ckpt)
    model.load_state_dict(state["model"])
    step = state["step"]
while step < args.steps:
    i = (step * 8) % 64
    loss = torch.nn.functional.mse_loss(model(X[i : i + 8]), Y[i : i + 8])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    step += 1
    if step % 3 == 0:
        torch.save({"model": model.state_dict(), "step": step}, args.ckpt)
