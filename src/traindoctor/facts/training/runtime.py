"""Runtime facts about losses and gradients (TD207, TD208, TD209): what produced a tensor, per
autograd's graph, and cheap reads of a few gradients.

No torch import at module level.
"""

from __future__ import annotations

from typing import Any

#: Autograd nodes that only move or view values: an activation under them is still the input.
_PASS_THROUGH = frozenset(
    (
        "ViewBackward0",
        "UnsafeViewBackward0",
        "ReshapeAliasBackward0",
        "SqueezeBackward0",
        "SqueezeBackward1",
        "SqueezeBackward2",
        "UnsqueezeBackward0",
        "PermuteBackward0",
        "TransposeBackward0",
        "TBackward0",
        "CloneBackward0",
        "ToCopyBackward0",
        "ExpandBackward0",
        "SelectBackward0",
        "SliceBackward0",
        "AliasBackward0",
    )
)


def producer(tensor: Any, depth: int = 6) -> str | None:
    """The name of the autograd node that computed ``tensor`` (``"SigmoidBackward0"``), looking
    through views, copies and dtype casts; None for a tensor outside any graph."""
    node = getattr(tensor, "grad_fn", None)
    for _ in range(depth):
        if node is None:
            return None
        name: str = type(node).__name__
        if name not in _PASS_THROUGH:
            return name
        nexts = node.next_functions
        node = nexts[0][0] if nexts else None
    return None


#: Nodes that scale the loss by a constant (``loss / k``, ``loss * w``): TD207 stays silent.
SCALING = frozenset(("DivBackward0", "DivBackward1", "MulBackward0", "MulBackward1"))


def root_nodes(tensor: Any, depth: int = 4) -> list[str]:
    """The names of the autograd nodes at the root of ``tensor``'s graph, outermost first,
    through scalings and pass-through nodes (``scaler.scale(loss / k)`` ->
    ``["MulBackward0", "DivBackward0", "NllLossBackward0"]``)."""
    out: list[str] = []
    node = getattr(tensor, "grad_fn", None)
    for _ in range(depth):
        if node is None:
            break
        name: str = type(node).__name__
        out.append(name)
        if name not in SCALING and name not in _PASS_THROUGH:
            break
        nexts = [n for n, _i in node.next_functions if n is not None]
        node = nexts[0] if len(nexts) == 1 else None
    return out
