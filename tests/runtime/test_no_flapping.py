"""The same script watched 6 times gets the same findings (issue 25: bearpaw's train-loader
TD103 appeared in 3 of 6 identical runs).

bearpaw's cifar.py shape, tiny: a train loader with workers and no ``persistent_workers``, a test
loader re-created every epoch (iterated once each: not a re-spawn), momentum SGD with weight decay
on every parameter. Each worker start pays a fixed 0.1 s (opening files, reading an index), so
TD103's start-up share sits well above its threshold whatever the machine's load; everything
else the doctor reports must be as stable.
"""

from __future__ import annotations

import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import traindoctor

HERE = os.path.abspath(__file__)


def _slow_start(worker_id: int) -> None:
    time.sleep(0.1)


def _bearpaw() -> None:
    torch.manual_seed(0)
    train_set = TensorDataset(torch.randn(128, 3, 8, 8), torch.randint(0, 10, (128,)))
    test_set = TensorDataset(torch.randn(64, 3, 8, 8), torch.randint(0, 10, (64,)))
    trainloader = DataLoader(train_set, batch_size=32, shuffle=True, num_workers=1, worker_init_fn=_slow_start)  # TRAIN
    model = nn.Sequential(nn.Flatten(), nn.Linear(192, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)  # OPTIM
    criterion = nn.CrossEntropyLoss()
    for _epoch in range(3):
        model.train()
        for x, y in trainloader:
            loss = criterion(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        testloader = DataLoader(test_set, batch_size=32, num_workers=1, worker_init_fn=_slow_start)
        model.eval()
        with torch.no_grad():
            for x, y in testloader:
                criterion(model(x), y).item()


def _row(marker: str) -> int:
    with open(HERE, encoding="utf-8") as fh:
        return next(i for i, line in enumerate(fh, 1) if f"# {marker}" in line and "_row(" not in line)


def test_six_identical_runs_report_the_same_findings() -> None:
    seen = []
    for _ in range(6):
        with traindoctor.watch() as doctor:
            _bearpaw()
        findings = doctor.report_dict()["findings"]
        seen.append(sorted((f["code"], f["location"]["row"]) for f in findings if f["filename"].endswith(".py")))
    assert seen == [seen[0]] * 6, seen
    assert ("TD103", _row("TRAIN")) in seen[0]
    assert ("TD204", _row("OPTIM")) in seen[0]
