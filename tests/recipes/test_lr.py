"""scale_lr, effective_batch and warmup_schedule."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR

from traindoctor.recipes import effective_batch, scale_lr, warmup_schedule


def test_linear_and_sqrt_rules() -> None:
    assert scale_lr(0.1, 256, 1024, rule="linear") == pytest.approx(0.4)
    assert scale_lr(1e-3, 256, 1024, rule="sqrt") == pytest.approx(2e-3)
    assert scale_lr(0.1, 256, 128, rule="linear") == pytest.approx(0.05)
    assert scale_lr(0.1, 256, 256, rule="sqrt") == 0.1


class MyAdam(torch.optim.Adam):
    pass


@pytest.mark.parametrize(
    ("optimizer", "factor"),
    [
        (torch.optim.SGD, 4.0),
        ("sgd", 4.0),
        ("LARS", 4.0),
        (torch.optim.AdamW, 2.0),
        (MyAdam, 2.0),
        ("adamw", 2.0),
        (torch.optim.RMSprop, 2.0),
        (torch.optim.Adagrad, 2.0),
        (torch.optim.NAdam, 2.0),
    ],
)
def test_auto_rule_by_optimizer_class_or_name(optimizer: object, factor: float) -> None:
    assert scale_lr(1.0, 64, 256, optimizer=optimizer) == pytest.approx(factor)


def test_auto_rule_by_optimizer_instance() -> None:
    params = [nn.Parameter(torch.zeros(2))]
    assert scale_lr(1.0, 64, 256, optimizer=torch.optim.SGD(params, lr=0.1)) == pytest.approx(4.0)
    assert scale_lr(1.0, 64, 256, optimizer=torch.optim.Adam(params)) == pytest.approx(2.0)


def test_auto_rule_needs_a_known_optimizer() -> None:
    with pytest.raises(ValueError, match="optimizer="):
        scale_lr(0.1, 256, 512)
    with pytest.raises(ValueError, match="rule='linear'"):
        scale_lr(0.1, 256, 512, optimizer=torch.optim.Rprop)
    with pytest.raises(ValueError, match="rule must be"):
        scale_lr(0.1, 256, 512, rule="cubic")


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "256"])
def test_rejects_bad_numbers(bad: object) -> None:
    with pytest.raises(ValueError):
        scale_lr(0.1, bad, 512, rule="linear")  # type: ignore[arg-type]


def test_effective_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    assert effective_batch(32) == 32
    assert effective_batch(32, accumulation=4) == 128
    assert effective_batch(32, 4, world_size=8) == 1024
    monkeypatch.setenv("WORLD_SIZE", "4")  # torchrun, before init_process_group
    assert effective_batch(32, 2) == 256
    monkeypatch.setenv("WORLD_SIZE", "garbage")
    assert effective_batch(32, 2) == 64
    with pytest.raises(ValueError):
        effective_batch(0)
    with pytest.raises(ValueError):
        effective_batch(8, world_size=0)


def test_effective_batch_reads_initialised_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this build")
    monkeypatch.setenv("WORLD_SIZE", "7")  # the process group wins over the environment
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert effective_batch(16, 2) == 32
    finally:
        dist.destroy_process_group()


def lrs(scheduler, optimizer, steps: int) -> list[float]:
    out = []
    for _ in range(steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out


def optimizer(lr: float = 1.0) -> torch.optim.Optimizer:
    return torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)


def test_warmup_alone_rises_linearly_then_stays() -> None:
    opt = optimizer(0.8)
    got = lrs(warmup_schedule(opt, 4), opt, 7)
    assert got == pytest.approx([0.2, 0.35, 0.5, 0.65, 0.8, 0.8, 0.8])


def test_warmup_then_cosine_counts_cosine_from_the_end_of_warmup() -> None:
    opt = optimizer(1.0)
    cosine = CosineAnnealingLR(opt, T_max=4)
    got = lrs(warmup_schedule(opt, 2, after=cosine), opt, 7)
    expected_cos = [0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(5)]
    assert got == pytest.approx([0.5, 0.75] + expected_cos)


def test_warmup_state_dict_resumes_the_same_sequence() -> None:
    opt = optimizer(1.0)
    sched = warmup_schedule(opt, 3, after=CosineAnnealingLR(opt, T_max=5))
    lrs(sched, opt, 2)
    state_opt, state_sched = opt.state_dict(), sched.state_dict()
    rest = lrs(sched, opt, 5)

    opt2 = optimizer(1.0)
    sched2 = warmup_schedule(opt2, 3, after=CosineAnnealingLR(opt2, T_max=5))
    opt2.load_state_dict(state_opt)
    sched2.load_state_dict(state_sched)
    assert lrs(sched2, opt2, 5) == pytest.approx(rest)


def test_zero_warmup_and_bad_arguments() -> None:
    opt = optimizer(0.3)
    assert lrs(warmup_schedule(opt, 0), opt, 3) == pytest.approx([0.3, 0.3, 0.3])
    cosine = CosineAnnealingLR(opt, T_max=3)
    assert warmup_schedule(opt, 0, after=cosine) is cosine
    with pytest.raises(ValueError):
        warmup_schedule(opt, -1)
    with pytest.raises(ValueError, match="same optimizer"):
        warmup_schedule(opt, 2, after=CosineAnnealingLR(optimizer(), T_max=3))
