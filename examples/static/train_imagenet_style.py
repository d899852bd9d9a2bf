"""A typical single-GPU image-classification script with several silent mistakes.

`traindoctor check examples/static` reports them; this file is never run by the demo.
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader
from torchvision import datasets, models, transforms

parser = argparse.ArgumentParser()
parser.add_argument("--data", default="./imagenet")
parser.add_argument("--batch-size", type=int, default=100)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--epochs", type=int, default=90)
parser.add_argument("--workers", type=int, default=0)
args = parser.parse_args()

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = True

train_set = datasets.ImageFolder(args.data, transforms.ToTensor())
train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, num_workers=args.workers)

model = models.resnet50().to(device)
criterion = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)

for epoch in range(args.epochs):
    model.train()
    running = 0.0
    for images, targets in train_loader:
        images, targets = images.to(device), targets.to(device)
        loss = criterion(model(images), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        running += loss
    scheduler.step()
    torch.save(model.state_dict(), "checkpoint.pt")
