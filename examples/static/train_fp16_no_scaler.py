"""float16 autocast with no GradScaler: small gradients underflow to zero."""

import torch
import torch.nn as nn

model = nn.Linear(512, 512).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def step(x, y):
    with torch.autocast("cuda"):
        loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()
