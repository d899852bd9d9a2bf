"""param_groups: the exact set of decayed parameters on real models, and unchanged numerics."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from traindoctor.recipes import param_groups

from ._models import (
    CUSTOM_DECAYED,
    RESNET_DECAYED,
    TRANSFORMER_DECAYED,
    CustomNormNet,
    TinyResNet,
    TransformerBlock,
)


def split(model: nn.Module, groups: list[dict]) -> tuple[set[str], set[str]]:
    """(decayed names, undecayed names), checked against the groups' weight_decay values."""
    names = {id(p): n for n, p in model.named_parameters()}
    decayed, kept = set(), set()
    for group in groups:
        target = decayed if group["weight_decay"] > 0 else kept
        for p in group["params"]:
            assert id(p) in names, "a group holds a parameter the model does not have"
            target.add(names[id(p)])
    assert not decayed & kept
    return decayed, kept


def test_resnet_decays_only_conv_and_linear_weights() -> None:
    model = TinyResNet()
    groups = param_groups(model, 0.05)
    decayed, kept = split(model, groups)
    assert decayed == RESNET_DECAYED
    assert kept == {n for n, _ in model.named_parameters()} - RESNET_DECAYED
    assert [g["weight_decay"] for g in groups] == [0.05, 0.0]


def test_groups_keep_named_parameters_order() -> None:
    model = TinyResNet()
    order = [p for _, p in model.named_parameters()]
    for group in param_groups(model, 0.1):
        positions = [next(i for i, q in enumerate(order) if q is p) for p in group["params"]]
        assert positions == sorted(positions)


def test_transformer_honours_no_weight_decay_and_skips_biases_and_layernorm() -> None:
    model = TransformerBlock()
    decayed, kept = split(model, param_groups(model, 0.1))
    assert decayed == TRANSFORMER_DECAYED
    # rank-3 parameters: excluded only because no_weight_decay() names them
    assert {"cls_token", "pos_embed", "norm1.weight", "attn.in_proj_bias", "mlp.0.bias"} <= kept


def test_norm_subclass_and_rmsnorm_with_rank_two_weights_are_not_decayed() -> None:
    model = CustomNormNet()
    assert model.my_norm.weight.dim() == 2 and model.rms.weight.dim() == 2
    decayed, kept = split(model, param_groups(model, 0.1))
    assert decayed == CUSTOM_DECAYED
    assert {"my_norm.weight", "my_norm.bias", "rms.weight", "group.weight", "inorm.bias", "scale", "conv.bias"} <= kept


def test_frozen_parameters_are_left_out() -> None:
    model = TinyResNet()
    for p in list(model.conv1.parameters()) + list(model.bn1.parameters()):
        p.requires_grad_(False)
    decayed, kept = split(model, param_groups(model, 0.1))
    assert decayed == RESNET_DECAYED - {"conv1.weight"}
    assert not {"conv1.weight", "bn1.weight", "bn1.bias"} & (decayed | kept)


def test_all_frozen_raises() -> None:
    model = nn.Linear(2, 2).requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        param_groups(model, 0.1)


def test_empty_group_is_omitted() -> None:
    groups = param_groups(nn.LayerNorm(4), 0.1)
    assert len(groups) == 1 and groups[0]["weight_decay"] == 0.0


def test_extra_patterns_globs_and_types() -> None:
    model = TransformerBlock()
    decayed, _ = split(model, param_groups(model, 0.1, no_decay=["embed", "mlp.*.weight"]))
    assert decayed == TRANSFORMER_DECAYED - {"embed.weight", "mlp.0.weight", "mlp.2.weight"}
    decayed, _ = split(model, param_groups(model, 0.1, no_decay=[nn.MultiheadAttention]))
    assert decayed == TRANSFORMER_DECAYED - {"attn.in_proj_weight", "attn.out_proj.weight"}


def test_a_single_pattern_may_be_passed_bare() -> None:
    model = TransformerBlock()
    assert param_groups(model, 0.1, no_decay="head") == param_groups(model, 0.1, no_decay=["head"])


def test_pattern_matches_whole_name_components_only() -> None:
    model = nn.ModuleDict({"unbiased": nn.Linear(3, 3), "head": nn.Linear(3, 3)})
    decayed, _ = split(model, param_groups(model, 0.1, no_decay=["head"]))
    assert decayed == {"unbiased.weight"}
    with pytest.raises(ValueError, match="match no parameter"):
        param_groups(model, 0.1, no_decay=["biased"])  # a substring, not a component


def test_dead_pattern_raises_with_the_real_names() -> None:
    # The article's filter: names like "BatchNorm.weight" never occur in an nn.Sequential.
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4))
    with pytest.raises(ValueError) as info:
        param_groups(model, 0.1, no_decay=["bias", "BatchNorm.weight"])
    assert "['BatchNorm.weight']" in str(info.value)
    assert "0.weight" in str(info.value)


def test_dead_type_and_bad_entries_raise() -> None:
    with pytest.raises(ValueError, match="Embedding"):
        param_groups(TinyResNet(), 0.1, no_decay=[nn.Embedding])
    with pytest.raises(TypeError):
        param_groups(TinyResNet(), 0.1, no_decay=[3])
    with pytest.raises(ValueError, match="weight_decay"):
        param_groups(TinyResNet(), -1.0)
    with pytest.raises(TypeError):
        param_groups(TinyResNet(), "0.1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        param_groups([nn.Linear(2, 2)], 0.1)  # type: ignore[arg-type]


class Wrapper(nn.Module):
    """A DeepSpeed-like engine: holds the model as .module and adds no parameters."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module


@pytest.mark.parametrize("wrap", ["generic", "data_parallel", "compile"])
def test_wrapped_models_give_the_same_groups(wrap: str) -> None:
    model = TransformerBlock()
    wrapped = {
        "generic": lambda m: Wrapper(m),
        "data_parallel": lambda m: nn.DataParallel(m),
        "compile": lambda m: torch.compile(m),  # lazy: nothing is compiled until it is called
    }[wrap](model)
    # patterns and no_weight_decay() names are the inner model's
    groups = param_groups(wrapped, 0.1, no_decay=["head"])
    decayed, _ = split(model, groups)
    assert decayed == TRANSFORMER_DECAYED - {"head.weight"}


def test_ddp_wrapped_model() -> None:
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this build")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = TinyResNet()
        ddp = nn.parallel.DistributedDataParallel(model)
        decayed, _ = split(model, param_groups(ddp, 0.1, no_decay=["fc"]))
        assert decayed == RESNET_DECAYED - {"fc.weight"}
    finally:
        dist.destroy_process_group()


def hand_written_groups(model: TransformerBlock, wd: float) -> list[dict]:
    decay, keep = [], []
    for name, p in model.named_parameters():
        if p.dim() <= 1 or name in ("cls_token", "pos_embed"):
            keep.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": keep, "weight_decay": 0.0}]


@pytest.mark.parametrize("foreach", [False, True])
def test_adamw_steps_are_bit_identical_to_hand_written_groups(foreach: bool) -> None:
    torch.manual_seed(0)
    ours = TransformerBlock()
    theirs = copy.deepcopy(ours)
    opt_ours = torch.optim.AdamW(param_groups(ours, 0.1), lr=1e-2, foreach=foreach)
    opt_theirs = torch.optim.AdamW(hand_written_groups(theirs, 0.1), lr=1e-2, foreach=foreach)
    tokens = torch.randint(0, 50, (4, 6))
    target = torch.tensor([0, 1, 1, 0])
    for _ in range(3):
        for model, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad()
            nn.functional.cross_entropy(model(tokens), target).backward()
            opt.step()
    for (name, a), (_, b) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert torch.equal(a, b), name
    # and the decay really happened on the decayed weights only
    assert opt_ours.param_groups[0]["weight_decay"] == 0.1


class LayerScaleBlock(nn.Module):
    """no_weight_decay() on a submodule, with a glob: names are relative to that submodule."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        self.gamma = nn.Parameter(torch.ones(1, 4))  # rank 2
        self.inner = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Linear(4, 4)})

    def no_weight_decay(self) -> list[str]:
        return ["gamma", "inner.*.weight"]


def test_submodule_no_weight_decay_with_globs() -> None:
    model = nn.Sequential(LayerScaleBlock(), nn.Linear(4, 2))
    decayed, kept = split(model, param_groups(model, 0.1))
    assert decayed == {"0.proj.weight", "1.weight"}
    assert {"0.gamma", "0.inner.a.weight", "0.inner.b.weight"} <= kept
