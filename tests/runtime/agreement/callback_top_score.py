# minGPT's adder shape: a trainer class runs the loop and calls back every iteration; the callback
# evaluates and saves the weights when the score beats the best so far. No resume path reads
# model.pt back: an export.
import os

import torch
from torch import nn


class Trainer:
    def __init__(self, model, iters):
        self.model, self.iters, self.callbacks = model, iters, []
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        self.iter_num = 0

    def run(self):
        g = torch.Generator().manual_seed(0)
        while self.iter_num < self.iters:
            x, y = torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)
            loss = nn.functional.mse_loss(self.model(x), y)
            self.model.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            for cb in self.callbacks:
                cb(self)
            self.iter_num += 1


model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
trainer = Trainer(model, iters=12)
top_score = 0


def batch_end_callback(trainer):
    global top_score
    if trainer.iter_num % 5 == 0:
        model.eval()
        with torch.no_grad():
            score = -nn.functional.mse_loss(model(torch.ones(4, 4)), torch.zeros(4, 1)).item() + 10
        if score > top_score:
            top_score = score
            torch.save(model.state_dict(), os.path.join(".", "model.pt"))
        model.train()


trainer.callbacks.append(batch_end_callback)
trainer.run()
