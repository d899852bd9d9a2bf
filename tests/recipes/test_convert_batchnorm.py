"""convert_batchnorm: what is replaced, what is kept, and eval-mode outputs where they must match."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from traindoctor.recipes import convert_batchnorm, param_groups
from traindoctor.recipes.norm import group_count

from ._models import TinyResNet


def trained_resnet() -> TinyResNet:
    """A ResNet whose BatchNorm layers have non-trivial affine parameters and running stats."""
    torch.manual_seed(0)
    model = TinyResNet()
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            with torch.no_grad():
                module.weight.uniform_(0.5, 1.5)
                module.bias.uniform_(-0.5, 0.5)
    model.train()
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(16, 3, 8, 8) * 2 + 1)
    return model.eval()


def test_sync_keeps_eval_outputs_identical() -> None:
    model = trained_resnet()
    x = torch.randn(4, 3, 8, 8)
    before = model(x)
    converted = convert_batchnorm(copy.deepcopy(model), to="sync").eval()
    assert not any(type(m) is nn.BatchNorm2d for m in converted.modules())
    assert sum(isinstance(m, nn.SyncBatchNorm) for m in converted.modules()) == 6
    assert torch.equal(converted(x), before)


def test_group_replaces_every_batchnorm_and_keeps_affine_parameters() -> None:
    model = trained_resnet()
    originals = {n: m for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)}
    converted = convert_batchnorm(copy.deepcopy(model), to="group", groups=4)
    modules = dict(converted.named_modules())
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in converted.modules())
    for name, bn in originals.items():
        gn = modules[name]
        assert isinstance(gn, nn.GroupNorm)
        assert (gn.num_groups, gn.num_channels, gn.eps, gn.affine) == (4, bn.num_features, bn.eps, True)
        assert torch.equal(gn.weight, bn.weight) and torch.equal(gn.bias, bn.bias)
        assert gn.weight is not bn.weight
        assert not gn.training  # the mode is kept
    # same parameter names and shapes: the optimizer groups look the same
    assert [(n, p.shape) for n, p in converted.named_parameters()] == [
        (n, p.shape) for n, p in model.named_parameters()
    ]
    assert not any("running" in key for key in converted.state_dict())


def test_group_matches_batchnorm_where_statistics_agree() -> None:
    # In eval mode BatchNorm uses its running statistics; GroupNorm uses each sample's group
    # statistics. When every (sample, group) slice has exactly the running mean and variance,
    # the two layers must compute the same thing.
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(8)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 2.0)
        bn.bias.uniform_(-1.0, 1.0)
        bn.running_mean.fill_(0.5)
        bn.running_var.fill_(4.0)
    bn.eval()
    x = torch.randn(3, 8, 5, 5, dtype=torch.float64)
    groups = x.view(3, 2, -1)
    groups = (groups - groups.mean(-1, keepdim=True)) / groups.std(-1, unbiased=False, keepdim=True)
    x = (groups * 2.0 + 0.5).view(3, 8, 5, 5)
    bn = bn.double()
    gn = convert_batchnorm(copy.deepcopy(bn), to="group", groups=2)
    assert isinstance(gn, nn.GroupNorm) and gn.num_groups == 2
    torch.testing.assert_close(gn(x), bn(x))
    # and they differ on an input that does not have those statistics
    other = torch.randn(3, 8, 5, 5, dtype=torch.float64) * 3
    assert not torch.allclose(gn(other), bn(other))


def test_group_count_uses_a_divisor() -> None:
    assert group_count(64, 32) == 32
    assert group_count(48, 32) == 24
    assert group_count(16, 32) == 16
    assert group_count(7, 32) == 7
    assert group_count(13, 4) == 1
    model = nn.Sequential(nn.Conv2d(3, 48, 1), nn.BatchNorm2d(48), nn.Conv3d(48, 6, 1), nn.BatchNorm3d(6))
    converted = convert_batchnorm(model)
    assert [m.num_groups for m in converted.modules() if isinstance(m, nn.GroupNorm)] == [24, 6]


def test_batchnorm1d_becomes_one_group_and_stays_meaningful() -> None:
    mlp = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
    converted = convert_batchnorm(mlp, to="group")
    assert converted[1].num_groups == 1
    out = converted[1](torch.randn(5, 16))
    assert out.std() > 0.5  # 32 groups of one feature would have made this all zeros


class MyBatchNorm(nn.BatchNorm2d):
    pass


def test_subclasses_frozen_flags_and_root_replacement() -> None:
    bn = MyBatchNorm(4)
    bn.weight.requires_grad_(False)
    gn = convert_batchnorm(bn, to="group", groups=2)
    assert isinstance(gn, nn.GroupNorm) and not gn.weight.requires_grad and gn.bias.requires_grad
    plain = convert_batchnorm(nn.BatchNorm2d(4, affine=False))
    assert isinstance(plain, nn.GroupNorm) and not plain.affine


def test_converted_model_trains_with_param_groups() -> None:
    model = convert_batchnorm(TinyResNet(), to="group", groups=4)
    opt = torch.optim.AdamW(param_groups(model, 0.05), lr=1e-2)
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([1, 2])
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="'group' or 'sync'"):
        convert_batchnorm(TinyResNet(), to="layer")
    with pytest.raises(ValueError, match="groups"):
        convert_batchnorm(TinyResNet(), groups=0)
    with pytest.raises(ValueError, match="uninitialised"):
        convert_batchnorm(nn.Sequential(nn.LazyBatchNorm2d()))
    with pytest.raises(TypeError):
        convert_batchnorm("model")  # type: ignore[arg-type]
