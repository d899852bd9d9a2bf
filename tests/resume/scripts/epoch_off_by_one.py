"""Resumes at the epoch it saved instead of the next one: the finished epoch is trained twice."""

import argparse

import torch

parser = argparse.ArgumentParser()
parser.add_argument("--resume", action="store_true")
args = parser.parse_args()

torch.manual_seed(0)
X = torch.randn(32, 8)
Y = X @ torch.randn(8, 1)
data = torch.utils.data.TensorDataset(X, Y)
sampler = torch.utils.data.DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=3)
loader = torch.utils.data.DataLoader(data, batch_size=8, sampler=sampler)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
start_epoch = 0
if args.resume:
    state = torch.load("ckpt.pt", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    start_epoch = state["epoch"]  # bug: the saved epoch is finished; resume at epoch + 1
for epoch in range(start_epoch, 10):
    sampler.set_epoch(epoch)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.save(
        {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "epoch": epoch,
        },
        "ckpt.pt",
    )
