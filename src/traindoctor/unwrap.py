"""The user's model inside the wrappers training puts around it: one rule for every part.

``param_groups`` (the recipes) names parameters as the inner model does, and
``traindoctor.checkpoint`` saves and loads the inner model's state, so a checkpoint written under
DDP or ``torch.compile`` loads into the plain model. Importable from any layer; torch is imported
only when a model is unwrapped (there is one to unwrap by then).
"""

from __future__ import annotations

from typing import Any


def unwrap_model(model: Any) -> Any:
    """The user's model inside ``torch.compile`` / DDP / DataParallel (or a similar) wrapper.

    A wrapper is recognised by type (``DistributedDataParallel``, ``DataParallel``), by the
    ``_orig_mod`` attribute of ``torch.compile``'s ``OptimizedModule``, or generically: a module
    with a ``.module`` submodule that holds every one of its parameters and buffers (DeepSpeed-style
    engines), so that unwrapping never leaves out state of the wrapper's own. Anything else,
    including a value that is not an ``nn.Module``, is returned as it is.
    """
    from torch import nn

    seen: set[int] = set()
    while id(model) not in seen:
        seen.add(id(model))
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module):
            model = inner
            continue
        inner = getattr(model, "module", None)
        if not isinstance(inner, nn.Module) or not isinstance(model, nn.Module):
            break
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = inner
            continue
        outer_params = {id(p) for p in model.parameters()}
        if (
            outer_params
            and outer_params == {id(p) for p in inner.parameters()}
            and {id(b) for b in model.buffers()} == {id(b) for b in inner.buffers()}
        ):
            model = inner
            continue
        break
    return model
