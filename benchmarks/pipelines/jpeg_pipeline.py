"""A decode-heavy CPU training script: JPEG decoding and augmentation with Pillow, a small CNN.

The images are generated (and JPEG-encoded in memory) at start, so nothing is downloaded. Each
sample is decoded, randomly cropped, resized, flipped and converted to a normalised tensor in
``__getitem__``, the work a real image pipeline does per sample; the model is a small CNN. Its own
settings are the ones a new user writes: ``num_workers=0`` and torch's default threads.

    python benchmarks/pipelines/jpeg_pipeline.py [--num-workers N] [--epochs E]
"""

from __future__ import annotations

import argparse
import io
import random

import torch
from PIL import Image, ImageDraw, ImageFilter
from torch import nn
from torch.utils.data import DataLoader, Dataset

SIZE = 160  # stored images
CROP = 64  # what the model sees


def make_jpegs(count: int, seed: int = 0) -> list[bytes]:
    """Random shapes on noisy backgrounds, JPEG-encoded (quality 90)."""
    rng = random.Random(seed)
    noise = Image.effect_noise((SIZE, SIZE), 40).convert("RGB")
    out = []
    for _ in range(count):
        image = Image.new("RGB", (SIZE, SIZE), tuple(rng.randrange(256) for _ in range(3)))
        image = Image.blend(image, noise, 0.3)
        draw = ImageDraw.Draw(image)
        for _ in range(6):
            x0, y0 = rng.randrange(SIZE), rng.randrange(SIZE)
            x1, y1 = min(SIZE, x0 + rng.randrange(10, 80)), min(SIZE, y0 + rng.randrange(10, 80))
            draw.ellipse((x0, y0, x1, y1), fill=tuple(rng.randrange(256) for _ in range(3)))
        buf = io.BytesIO()
        image.save(buf, format="JPEG", quality=90)
        out.append(buf.getvalue())
    return out


class JpegDataset(Dataset):
    """Decodes and augments one JPEG per sample (the CPU cost of a real image pipeline)."""

    def __init__(self, jpegs: list[bytes]) -> None:
        self.jpegs = jpegs
        self.mean = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
        self.std = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

    def __len__(self) -> int:
        return len(self.jpegs)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = Image.open(io.BytesIO(self.jpegs[index])).convert("RGB")
        side = random.randint(SIZE // 2, SIZE)
        x, y = random.randint(0, SIZE - side), random.randint(0, SIZE - side)
        image = image.crop((x, y, x + side, y + side)).resize((CROP, CROP), Image.BILINEAR)
        if random.random() < 0.5:
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        image = image.filter(ImageFilter.GaussianBlur(radius=random.uniform(0.1, 1.0)))
        tensor = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8)
        tensor = tensor.view(CROP, CROP, 3).permute(2, 0, 1).float().div_(255)
        return (tensor - self.mean) / self.std, index % 10


def model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 10),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--num-workers", type=int, default=0)
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    dataset = JpegDataset(make_jpegs(args.images))
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=True,
        num_workers=args.num_workers,
        persistent_workers=args.num_workers > 0,
    )
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(args.epochs):
        total = 0.0
        for images, labels in loader:
            loss = nn.functional.cross_entropy(net(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print(f"epoch {epoch}: mean loss {total / len(loader):.4f}")


if __name__ == "__main__":
    main()
