"""A complete small training script built from traindoctor's recipes.

It trains a small convolutional classifier on synthetic images, on CUDA when there is one and on
the CPU otherwise, in a few seconds. Every configuration choice that traindoctor checks comes from
a recipe, so both ``traindoctor check examples/recipes_train.py`` and
``traindoctor run examples/recipes_train.py`` have nothing to report:

- DataLoader options for this machine:         ``loader_kwargs``
- weight decay only on weights:               ``param_groups``
- learning rate for the effective batch:      ``scale_lr`` + ``effective_batch``
- warmup for the scaled learning rate:        ``warmup_schedule``
- mixed precision that fits the device:       ``autocast_settings``
- reproducible, distinct worker streams:      ``seed_everything``
- a checkpoint that resumes (model, optimizer, scheduler, scaler, every RNG, written atomically):
  ``traindoctor.checkpoint.save`` / ``load``

Run: ``python examples/recipes_train.py --epochs 3 --out /tmp/run`` (``--resume`` continues).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from traindoctor import checkpoint
from traindoctor.recipes import (
    autocast_settings,
    effective_batch,
    loader_kwargs,
    param_groups,
    scale_lr,
    seed_everything,
    warmup_schedule,
)


class SyntheticShapes(Dataset):
    """Images of a bright square whose position is the class, with random flips as augmentation."""

    def __init__(self, size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, 4, (size,), generator=generator)
        self.noise = torch.randn(size, 3, 16, 16, generator=generator) * 0.3

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        label = int(self.labels[index])
        image = self.noise[index].clone()
        row, col = divmod(label, 2)
        image[:, row * 8 : row * 8 + 8, col * 8 : col * 8 + 8] += 1.0
        if torch.rand(()) < 0.5:  # augmentation: flip vertically (the class moves with it)
            image = image.flip(1)
            label = (label + 2) % 4
        return image, torch.tensor(label)


def build_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1, bias=False),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 4),
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--base-lr", type=float, default=2e-3, help="learning rate tuned for --base-batch")
    parser.add_argument("--base-batch", type=int, default=32)
    parser.add_argument("--weight-decay", type=float, default=0.05)
    parser.add_argument("--warmup-steps", type=int, default=10)
    parser.add_argument("--samples", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("recipes_run"))
    parser.add_argument("--resume", action="store_true")
    return parser.parse_args(argv)


def evaluate(model: nn.Module, val_loader: DataLoader, device: torch.device, amp) -> float:
    model.eval()
    correct = 0
    total = 0
    with torch.no_grad():
        for images, labels in val_loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            with amp.autocast():
                logits = model(images)
            correct += (logits.argmax(1) == labels).sum().item()
            total += labels.numel()
    model.train()
    return correct / max(total, 1)


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parse_args(argv)
    seed_everything(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True  # fixed input shapes

    train_set = SyntheticShapes(args.samples, seed=1)
    val_set = SyntheticShapes(128, seed=2)
    train_loader = DataLoader(
        train_set, batch_size=args.batch_size, shuffle=True, drop_last=True, **loader_kwargs(train_set, device=device)
    )
    val_loader = DataLoader(val_set, batch_size=64, **loader_kwargs(val_set, device=device))

    model = build_model().to(device)
    batch = effective_batch(args.batch_size, args.accumulation)
    lr = scale_lr(args.base_lr, args.base_batch, batch, optimizer=torch.optim.AdamW)
    optimizer = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=lr)
    scheduler = warmup_schedule(optimizer, args.warmup_steps)
    amp = autocast_settings(device)
    criterion = nn.CrossEntropyLoss()

    args.out.mkdir(parents=True, exist_ok=True)
    last = args.out / "last.pt"
    start_epoch = 0
    if args.resume and last.exists():
        info = checkpoint.load(last, model=model, optimizer=optimizer, scheduler=scheduler, scaler=amp.scaler)
        start_epoch = info.epoch + 1

    model.train()
    running = 0.0
    for epoch in range(start_epoch, args.epochs):
        total = torch.zeros((), device=device)  # summed on the device: no sync per step (TD801)
        for index, (images, labels) in enumerate(train_loader):
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            with amp.autocast():
                loss = criterion(model(images), labels) / args.accumulation
            amp.scaler.scale(loss).backward()
            if (index + 1) % args.accumulation == 0:
                amp.scaler.unscale_(optimizer)
                nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
                amp.scaler.step(optimizer)
                amp.scaler.update()
                optimizer.zero_grad(set_to_none=True)
                scheduler.step()
            total += loss.detach() * args.accumulation
        running = total.item()
        # at an epoch boundary the epoch counter is the data position
        checkpoint.save(last, model=model, optimizer=optimizer, scheduler=scheduler, scaler=amp.scaler, epoch=epoch)
        accuracy = evaluate(model, val_loader, device, amp)
        print(f"epoch {epoch}: loss {running / len(train_loader):.3f}, val accuracy {accuracy:.2f}")
    return {"loss": running / max(len(train_loader), 1), "lr": lr}


if __name__ == "__main__":
    main()
