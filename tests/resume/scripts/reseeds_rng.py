"""bearpaw's cifar.py shape: seeds torch at start, saves model, optimizer and epoch, but no RNG
state; the epoch counter is right, so the resumed run reshuffles as the first epoch did."""

import argparse
import os

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--resume", default="")
parser.add_argument("--save", default="ckpt/last.pt")
args = parser.parse_args()

torch.manual_seed(0)
X = torch.arange(64, dtype=torch.float32).reshape(32, 2) / 64
Y = X.sum(1, keepdim=True)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=8, shuffle=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
start_epoch = 0
if args.resume:
    state = torch.load(args.resume, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    start_epoch = state["epoch"] + 1
for epoch in range(start_epoch, 10):
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    os.makedirs(os.path.dirname(args.save), exist_ok=True)
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, args.save)
