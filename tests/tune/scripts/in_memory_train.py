"""A tiny training script whose batches are in-memory tensors: loading is nearly free."""

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(4096, 64, generator=g), torch.randn(4096, 1, generator=g))
    loader = DataLoader(data, batch_size=64, shuffle=True)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(4):
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    print("finished")
