"""TD602 batchnorm-without-syncbn: runtime."""

from __future__ import annotations

import torch
from helpers.rule_loops import codes, conv_bn_net, finding, train_steps
from torch import nn

import traindoctor


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
