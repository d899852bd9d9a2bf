"""Which random number generators a file draws from (TD504 asks the checkpoint for each)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from traindoctor.static.vocab import RNG_CPU, RNG_CUDA, RNG_NUMPY, RNG_PYTHON

if TYPE_CHECKING:
    from traindoctor.static.context import FileContext

#: numpy.random / random calls that do not draw from the global generator.
_NUMPY_NON_DRAWS = {
    "seed",
    "get_state",
    "set_state",
    "default_rng",
    "RandomState",
    "Generator",
    "SeedSequence",
    "PCG64",
    "MT19937",
    "Philox",
    "SFC64",
    "BitGenerator",
}
_PYTHON_NON_DRAWS = {"seed", "getstate", "setstate", "Random", "SystemRandom"}


def file_draws(ctx: FileContext) -> set[str]:
    """The RNGs a file draws from: torch CPU always, CUDA when it targets CUDA, NumPy, ``random``."""
    out = {RNG_CPU}
    if ctx.targets_cuda:
        out.add(RNG_CUDA)
    for qn, _ in ctx.calls_to_prefix("numpy.random."):
        if qn.split(".")[2] not in _NUMPY_NON_DRAWS:
            out.add(RNG_NUMPY)
            break
    for qn, _ in ctx.calls_to_prefix("random."):
        if qn.count(".") == 1 and qn.split(".")[1] not in _PYTHON_NON_DRAWS:
            out.add(RNG_PYTHON)
            break
    return out
