"""Facts about the live model's structure that runtime rules read (TD210).

No torch import at module level.
"""

from __future__ import annotations

import itertools
from typing import Any

from traindoctor.runtime.events import SessionView
from traindoctor.runtime.probes.modules import module_stats

#: Layer class name -> the BatchNorm class name its output may feed without the bias mattering.
_FEEDS = {"Conv1d": "BatchNorm1d", "Conv2d": "BatchNorm2d", "Conv3d": "BatchNorm3d", "Linear": "BatchNorm1d"}


def _trained_layers(session: SessionView) -> set[int]:
    """``id()`` of the conv/linear layers that ran a forward in train mode with autograd on."""
    out = set()
    for rec in module_stats(session).of_kind("conv", "linear"):
        module = rec.module()
        if module is not None and rec.total(training=True, grad=True) > 0:
            out.add(id(module))
    return out


def biased_layers_before_batchnorm(session: SessionView, roots: list[Any]) -> list[tuple[Any, str, str, int]]:
    """(root, layer name, BatchNorm name, bias elements) for each ``Conv*d``/``Linear`` of ``roots``
    with a trainable bias whose next sibling in an ``nn.Sequential`` is the matching BatchNorm,
    among the layers that trained so far. Names are qualified from the root (``features.0``)."""
    import torch.nn as nn

    trained = _trained_layers(session)
    if not trained:
        return []
    out: list[tuple[Any, str, str, int]] = []
    seen: set[int] = set()
    for root in roots:
        for prefix, module in root.named_modules():
            if not isinstance(module, nn.Sequential) or id(module) in seen:
                continue
            seen.add(id(module))
            children: list[tuple[str, Any]] = list(module.named_children())
            for (name_a, a), (name_b, b) in itertools.pairwise(children):
                wanted = _FEEDS.get(type(a).__name__)
                bias = getattr(a, "bias", None)
                if wanted is None or type(b).__name__ != wanted or id(a) not in trained:
                    continue
                if bias is None or not getattr(bias, "requires_grad", False):
                    continue
                at = f"{prefix}." if prefix else ""
                out.append((root, at + name_a, at + name_b, int(bias.numel())))
    return out
