# pytorch/examples word_language_model shape: the whole model saved through an open file when the
# validation loss improves on the running best, read back only after training for the test.
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
lowest = None
for epoch in range(3):
    for _ in range(4):
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    val_loss = nn.functional.mse_loss(model(torch.ones(4, 4)), torch.zeros(4, 1)).item()
    if not lowest or val_loss < lowest:
        with open("model.pt", "wb") as f:
            torch.save(model, f)
        lowest = val_loss
with open("model.pt", "rb") as f:
    model = torch.load(f, weights_only=False)
print(nn.functional.mse_loss(model(torch.ones(4, 4)), torch.zeros(4, 1)).item())
