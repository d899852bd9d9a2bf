import os

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
ds = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(ds, batch_size=8, shuffle=True)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
best = float("inf")
if os.path.exists("best.pt"):  # resume
    model.load_state_dict(torch.load("best.pt"))
for epoch in range(3):
    for x, y in loader:
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    val = loss.item()
    if val < best:
        best = val
        torch.save(model.state_dict(), "best.pt")
