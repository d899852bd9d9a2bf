"""A tiny ``accelerate`` training script with seeded mistakes (``--mistakes``) or none.

Used by tests/integrations under ``traindoctor run``. CPU, synthetic data, seconds.

Seeded mistakes (each a switch in ``--mistakes``, comma-separated):
  decay   AdamW over ``model.parameters()``: decay on biases and LayerNorm gains (TD204)
  bn      BatchNorm with a per-forward batch of 4 under ``gradient_accumulation_steps=4`` (TD202)
  save    ``accelerator.save(model.state_dict(), ...)`` alone every epoch (TD501)
  slow    a slow map-style dataset read with ``num_workers=0`` (TD102)
The healthy twin uses two parameter groups, LayerNorm, bf16 mixed precision (accelerate's
autocast) and ``accelerator.save_state`` every epoch (not safetensors, so the weights go through
``torch.save``): nothing to report.
"""

import argparse
import os
import sys
import time

import torch
from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


class SlowDataset(Dataset):
    def __init__(self, x, y, delay):
        self.x, self.y, self.delay = x, y, delay

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        time.sleep(self.delay)
        return self.x[i], self.y[i]


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            is_norm = isinstance(module, (nn.LayerNorm, nn.BatchNorm1d))
            (no_decay if is_norm or name == "bias" else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--mistakes", default="", help="comma-separated: decay,bn,save,slow")
    parser.add_argument("--out", default=".")
    parser.add_argument("--gpu", action="store_true", help="train on CUDA with fp16 (accelerate's GradScaler)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--data-ms", type=float, default=25.0, help="'slow': ms to load one sample")
    args = parser.parse_args()
    mistakes = [m for m in args.mistakes.split(",") if m]
    accumulation = 4 if "bn" in mistakes else 1
    precision = "no" if mistakes else ("fp16" if args.gpu else "bf16")
    accelerator = Accelerator(cpu=not args.gpu, mixed_precision=precision, gradient_accumulation_steps=accumulation)
    torch.manual_seed(0)
    norm = nn.BatchNorm1d(32) if "bn" in mistakes else nn.LayerNorm(32)
    model = nn.Sequential(nn.Linear(16, 32), norm, nn.ReLU(), nn.Linear(32, 2))
    if "decay" in mistakes:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    else:
        optimizer = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3)
    x, y = torch.randn(args.samples, 16), torch.randint(0, 2, (args.samples,))
    data = SlowDataset(x, y, args.data_ms / 1000) if "slow" in mistakes else TensorDataset(x, y)
    loader = DataLoader(
        data, batch_size=4 if "bn" in mistakes else 16, shuffle=True, num_workers=0, pin_memory=args.gpu
    )
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for epoch in range(args.epochs):
        model.train()
        for xb, yb in loader:
            with accelerator.accumulate(model):
                loss = nn.functional.cross_entropy(model(xb), yb)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
        if "save" in mistakes:
            accelerator.save(accelerator.unwrap_model(model).state_dict(), os.path.join(args.out, "weights.pt"))
        else:
            accelerator.save_state(os.path.join(args.out, "state"), safe_serialization=False)
    print("final loss", float(loss))


if __name__ == "__main__":
    sys.exit(main())
