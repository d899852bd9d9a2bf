"""Capture and restore every random number generator a training run draws from.

All states are stored as tensors, ints, floats and strings inside plain dicts, so a checkpoint
that holds them loads with ``torch.load(path, weights_only=True)``: nothing is unpickled but
tensors and primitives.
"""

from __future__ import annotations

import random
import sys
from typing import Any

#: Types ``torch.load(weights_only=True)`` rebuilds without importing anything else.
_PRIMITIVES = (str, int, float, bool, bytes, type(None))


def capture_rng() -> dict[str, Any]:
    """The state of torch's CPU generator, every CUDA device's, NumPy's global and ``random``'s."""
    import torch

    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    version, internal, gauss_next = random.getstate()
    state["python"] = {
        "version": int(version),
        "state": torch.tensor(internal, dtype=torch.int64),
        "gauss_next": gauss_next,
    }
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        kind, keys, pos, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = {
            "kind": str(kind),
            "keys": torch.from_numpy(keys.astype("int64")),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        }
    return state


def restore_rng(state: dict[str, Any]) -> list[str]:
    """Restore what :func:`capture_rng` saved; return the generators restored."""
    import torch

    restored = []
    if "torch" in state:
        torch.set_rng_state(state["torch"].to("cpu", torch.uint8))
        restored.append("torch")
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available():
        count = min(len(cuda), torch.cuda.device_count())
        for index in range(count):
            torch.cuda.set_rng_state(cuda[index].to("cpu", torch.uint8), index)
        restored.append("cuda")
    py = state.get("python")
    if py is not None:
        internal = tuple(int(v) for v in py["state"].tolist())
        random.setstate((int(py["version"]), internal, py["gauss_next"]))
        restored.append("python")
    np_state = state.get("numpy")
    if np_state is not None:
        import numpy

        numpy.random.set_state(
            (
                np_state["kind"],
                np_state["keys"].numpy().astype(numpy.uint32),
                int(np_state["pos"]),
                int(np_state["has_gauss"]),
                float(np_state["cached_gaussian"]),
            )
        )
        restored.append("numpy")
    return restored


class NotPlainError(TypeError):
    """A value would need pickled Python objects; ``weights_only=True`` could not load it."""


def check_plain(obj: Any, where: str = "checkpoint") -> None:
    """Raise :class:`NotPlainError` naming the first value that is not tensor/primitive/container.

    Checked before writing, so a bad ``extra=`` or an exotic scheduler state fails at save time
    with the key path instead of at resume time with an unpickling error.
    """
    import torch

    stack: list[tuple[str, Any]] = [(where, obj)]
    while stack:
        path, value = stack.pop()
        if type(value).__name__ in ("DTensor", "ShardedTensor"):
            raise NotPlainError(
                f"{path} is a {type(value).__name__} (one rank's shard of a sharded tensor): a "
                "single file would hold this rank's piece only; save sharded models with "
                "traindoctor.checkpoint.save on every rank (it uses torch.distributed.checkpoint)"
            )
        if isinstance(value, _PRIMITIVES) or isinstance(value, (torch.Tensor, torch.dtype, torch.device, torch.Size)):
            continue
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, _PRIMITIVES):
                    raise NotPlainError(f"{path}: key {key!r} of type {type(key).__name__}")
                stack.append((f"{path}[{key!r}]", item))
            continue
        if isinstance(value, (list, tuple)):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
            continue
        raise NotPlainError(
            f"{path} is a {type(value).__module__}.{type(value).__qualname__}: checkpoints hold "
            "only tensors, numbers, strings and dicts/lists of them (loads with weights_only=True)"
        )
