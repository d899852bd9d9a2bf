"""Training scripts, as source text, that the tests of more than one file check."""

from __future__ import annotations

# An ImageNet-example worker whose ``{reassign}`` line may change ``args.workers``
# (tests/static/test_args.py, tests/rules/test_td103.py).
PARSER = """
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("-j", "--workers", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--epochs", type=int, default=90)

def main_worker(gpu, ngpus_per_node, args):
    {reassign}
    loader = torch.utils.data.DataLoader(dataset, batch_size=256, num_workers=args.workers)
    model = Net().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        train(loader, model, optimizer)

def train(loader, model, optimizer):
    for x, y in loader:
        model(x).sum().backward()
        optimizer.step()

if __name__ == "__main__":
    main_worker(0, 1, parser.parse_args())
"""

# BatchNorm training with gradient accumulation, ``{accum}`` and ``{batch}`` to fill in
# (tests/rules/test_td202.py, tests/rules/test_td206.py).
BN_ACCUM = """
import argparse
import torch
import torchvision

parser = argparse.ArgumentParser()
parser.add_argument("--accum", type=int, default={accum})
args = parser.parse_args()
model = torchvision.models.resnet18()
loader = torch.utils.data.DataLoader(train_set, batch_size={batch})
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / args.accum
    loss.backward()
    if (i + 1) % args.accum == 0:
        optimizer.step()
"""
