"""Normalisation recipe: replace BatchNorm where it sees too few samples (TD202, TD602).

BatchNorm normalises over the samples of one forward pass. With gradient accumulation or a small
per-GPU batch that is far fewer than the optimizer's effective batch, and the batch statistics get
noisy. Two ways out:

- ``to="sync"``: ``SyncBatchNorm`` computes the statistics over all ranks of a DDP job. Same layer,
  same parameters and running statistics, identical outputs in eval mode; it helps only when the
  per-rank batch is small *and* there are several ranks (it does nothing for accumulation).
- ``to="group"``: ``GroupNorm`` normalises each sample on its own, so it is independent of the batch
  size (Wu & He 2018): the answer for accumulation and for tiny batches. It has no running
  statistics, so a trained model's outputs change; convert before training (or fine-tune after).

Convert before creating the optimizer (the new layers have new parameter objects) and before
wrapping the model in DDP.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm, _LazyNormBase

__all__ = ["convert_batchnorm", "group_count"]


def group_count(channels: int, groups: int) -> int:
    """The largest divisor of ``channels`` that is <= ``groups`` (GroupNorm needs a divisor)."""
    for candidate in range(min(groups, channels), 0, -1):
        if channels % candidate == 0:
            return candidate
    return 1


def _to_group_norm(bn: _BatchNorm, groups: int) -> nn.GroupNorm:
    if isinstance(bn, _LazyNormBase) and bn.has_uninitialized_params():
        raise ValueError(f"convert_batchnorm: {type(bn).__name__} is still uninitialised; run one forward pass first")
    channels = bn.num_features
    # BatchNorm1d often sees (N, C) inputs, where per-sample groups of a few features would
    # normalise every value to 0; one group (LayerNorm over the features, per-channel affine) is
    # the variant that is never degenerate.
    count = 1 if isinstance(bn, nn.BatchNorm1d) else group_count(channels, groups)
    weight = bn.weight if bn.affine else None
    dtype = weight.dtype if weight is not None else None
    device = weight.device if weight is not None else None
    gn = nn.GroupNorm(count, channels, eps=bn.eps, affine=bn.affine, device=device, dtype=dtype)
    if bn.affine:
        with torch.no_grad():
            gn.weight.copy_(bn.weight)
            gn.bias.copy_(bn.bias)
        gn.weight.requires_grad_(bn.weight.requires_grad)
        gn.bias.requires_grad_(bn.bias.requires_grad)
    gn.train(bn.training)
    return gn


def _replace(module: nn.Module, groups: int) -> nn.Module:
    if isinstance(module, _BatchNorm):
        return _to_group_norm(module, groups)
    for name, child in list(module.named_children()):
        new = _replace(child, groups)
        if new is not child:
            setattr(module, name, new)
    return module


def convert_batchnorm(model: nn.Module, to: str = "group", groups: int = 32) -> nn.Module:
    """Replace every BatchNorm layer (``BatchNorm1d/2d/3d``, ``SyncBatchNorm``, subclasses).

    ``to="group"``: each becomes ``GroupNorm(g, C, eps=bn.eps, affine=bn.affine)`` with
    ``g = group_count(C, groups)`` (the largest divisor of ``C`` not above ``groups``) for 2d/3d
    layers and ``g = 1`` for ``BatchNorm1d``; the affine weight and bias are copied (same shape
    ``(C,)``), running statistics are dropped. ``to="sync"``: PyTorch's
    ``SyncBatchNorm.convert_sync_batchnorm`` (parameters and running statistics kept). Children are
    replaced in place; use the returned module (the root itself is replaced when it is a
    BatchNorm).

    Example::

        model = convert_batchnorm(build_model(), to="group")   # accumulation / tiny batches
        model = convert_batchnorm(build_model(), to="sync")    # DDP with a small per-rank batch
        optimizer = torch.optim.AdamW(param_groups(model, 0.05), lr=1e-3)
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"convert_batchnorm() needs an nn.Module, got {type(model).__name__}")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"groups must be a positive int, got {groups!r}")
    if to == "sync":
        converted: nn.Module = nn.SyncBatchNorm.convert_sync_batchnorm(model)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        return converted
    if to == "group":
        return _replace(model, groups)
    raise ValueError(f"convert_batchnorm(to=...) must be 'group' or 'sync', got {to!r}")
