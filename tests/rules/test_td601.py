"""TD601 sampler-set-epoch-missing: static and runtime."""

from __future__ import annotations

import torch
from helpers.rule_loops import codes, conv_bn_net, finding, images, line_of
from helpers.snippets import data_check, data_rows
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import traindoctor

# ------------------------------------------------------------------ traindoctor check
IMAGENET_DDP = """
import torch
import torch.utils.data
import torch.utils.data.distributed

def train(train_loader, model, optimizer):
    for i, (images, target) in enumerate(train_loader):
        loss = model(images.cuda()).sum()
        loss.backward()

def main_worker(args):
    if args.distributed:
        train_sampler = torch.utils.data.distributed.DistributedSampler(train_dataset)
        val_sampler = torch.utils.data.distributed.DistributedSampler(val_dataset, shuffle=False)
    else:
        train_sampler = None
        val_sampler = None
    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=args.batch_size, shuffle=(train_sampler is None),
        num_workers=args.workers, pin_memory=True, sampler=train_sampler)
    val_loader = torch.utils.data.DataLoader(
        val_dataset, batch_size=args.batch_size, shuffle=False,
        num_workers=args.workers, pin_memory=True, sampler=val_sampler)
    for epoch in range(args.start_epoch, args.epochs):
        if args.distributed:
            train_sampler.set_epoch(epoch)
        train(train_loader, model, optimizer)
"""


def test_td601_imagenet_example_is_clean_and_fires_without_set_epoch():
    assert data_rows(IMAGENET_DDP, ["TD601"]) == []
    broken = IMAGENET_DDP.replace("            train_sampler.set_epoch(epoch)\n", "            pass\n")
    (finding,) = data_check(broken, ["TD601"]).findings
    assert finding.location.row == 13  # the train sampler; the val sampler does not shuffle
    assert "loop at line 24" in finding.message


def test_td601_set_epoch_on_another_sampler_does_not_count():
    src = """
    from torch.utils.data import DataLoader, DistributedSampler
    s1 = DistributedSampler(a)
    s2 = DistributedSampler(b)
    l1 = DataLoader(a, sampler=s1)
    l2 = DataLoader(b, sampler=s2)
    for epoch in range(3):
        l1.sampler.set_epoch(epoch)
        for x in l1:
            model(x).sum().backward()
        for x in l2:
            model(x).sum().backward()
    """
    assert data_rows(src, ["TD601"]) == [("TD601", 4)]


def test_td601_unknown_set_epoch_receiver_silences():
    src = """
    from torch.utils.data import DataLoader, DistributedSampler
    s1 = DistributedSampler(a)
    l1 = DataLoader(a, sampler=s1)
    for epoch in range(3):
        for s in samplers:
            s.set_epoch(epoch)
        for x in l1:
            pass
    """
    assert data_rows(src, ["TD601"]) == []


# ------------------------------------------------------------------ traindoctor run
def _data() -> TensorDataset:
    return TensorDataset(*images(16))


def _epochs(
    model: nn.Module, opt: torch.optim.Optimizer, loader: DataLoader, sampler, *, set_epoch: bool, epochs: int = 3
) -> list[list[int]]:
    orders = []
    for epoch in range(epochs):
        if set_epoch:
            sampler.set_epoch(epoch)
        orders.append(list(iter(sampler)))
        for x, y in loader:
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    return orders


def test_td601_same_order_every_epoch() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD601"]) as doctor:
        sampler = DistributedSampler(_data(), num_replicas=2, rank=0)  # sampler line
        loader = DataLoader(_data(), batch_size=4, sampler=sampler)
        orders = _epochs(model, opt, loader, sampler, set_epoch=False)
    assert orders[0] == orders[1] == orders[2]  # the mistake is real
    f = finding(doctor, "TD601")
    assert f.filename == __file__ and f.location.row == line_of("# sampler line")
    # Iterated by the loop's own iter() and by the DataLoader: six epochs' worth, all epoch 0.
    assert f.evidence == {"iterations": 6, "epoch_value": 0, "set_epoch_calls": 0, "num_replicas": 2}


def test_td601_silent_with_set_epoch_or_without_shuffle() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD601"]) as doctor:
        sampler = DistributedSampler(_data(), num_replicas=2, rank=1)
        orders = _epochs(model, opt, DataLoader(_data(), batch_size=4, sampler=sampler), sampler, set_epoch=True)
        fixed = DistributedSampler(_data(), num_replicas=2, rank=0, shuffle=False)
        _epochs(model, opt, DataLoader(_data(), batch_size=4, sampler=fixed), fixed, set_epoch=False)
    assert orders[0] != orders[1]
    assert codes(doctor) == []
