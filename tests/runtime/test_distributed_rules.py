"""Runtime halves of TD601 (sampler epoch) and TD602 (BatchNorm without SyncBatchNorm) on CPU.

``DistributedSampler`` with explicit ``num_replicas``/``rank`` needs no process group; TD602's
world size is faked on the session (the multi-process harness is tested with the core).
"""

from __future__ import annotations

import torch
from rule_loops import codes, conv_bn_net, finding, images, line_of, train_steps
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import traindoctor


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


# ---------------------------------------------------------------- TD601
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


# ---------------------------------------------------------------- TD602
def test_td602_small_per_rank_batchnorm_batch() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD602", "TD202"]) as doctor:
        doctor.world_size = 2  # as under torchrun with 2 ranks
        train_steps(model, opt, steps=2, batch=4)
    assert codes(doctor) == ["TD602"]  # TD202 leaves the plain DDP case to TD602
    assert finding(doctor, "TD602").evidence == {
        "per_rank_batch": 4,
        "world_size": 2,
        "global_batch": 8,
        "batchnorm_layers": 1,
        "min_batch": 16,
    }


def test_td602_silent_with_syncbn_single_process_or_large_batch() -> None:
    model = nn.SyncBatchNorm.convert_sync_batchnorm(conv_bn_net())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD602"]) as synced:
        synced.world_size = 2
        train_steps(model, opt, steps=2, batch=4)
    plain = conv_bn_net()
    opt2 = torch.optim.SGD(plain.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD602"]) as single:
        train_steps(plain, opt2, steps=2, batch=4)
    with traindoctor.watch(select=["TD602"]) as large:
        large.world_size = 2
        train_steps(plain, opt2, steps=2, batch=32)
    assert codes(synced) == [] and codes(single) == [] and codes(large) == []
