"""When are two configurations measured apart? Repeated runs, compared without assuming a distribution.

``tune SCRIPT`` measures each finalist several times, in interleaved rounds, and compares the runs
of two configurations with :func:`compare`:

* **faster** / **slower**: every run of one is faster than every run of the other, with at least
  :data:`MIN_RUNS` runs each. If both came from the same distribution (no real difference), the
  chance of ``n`` runs all above ``m`` others is ``1 / C(n + m, n)``: 1 in 20 for 3 and 3, so
  the separation is a one-sided test at 95% (:func:`separation_chance`);
* **tied**: all runs of both lie within ``tie`` (a share) of each other, with at least 2 runs
  each: whatever the difference is, it is smaller than the margin tune calls equal speed;
* **undecided**: neither (too few runs, or runs that overlap by more than the margin); another
  round may decide it. A pair still undecided when the rounds or the budget run out is treated
  as tied, and the simpler configuration wins.

:func:`interval` (the range of the runs) is what the report shows beside each median: for ``n``
runs of one configuration it covers that configuration's true median with probability
``1 - 2^(1 - n)`` (75% for 3 runs, 88% for 4).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

MIN_RUNS = 3
FASTER, SLOWER, TIED, UNDECIDED = "faster", "slower", "tied", "undecided"


def interval(rates: Sequence[float]) -> tuple[float, float] | None:
    """The lowest and highest of the runs (None without runs)."""
    return (min(rates), max(rates)) if rates else None


def separation_chance(n: int, m: int) -> float:
    """Chance that ``n`` runs all beat ``m`` runs when both come from one distribution."""
    return 1.0 / math.comb(n + m, n)


def compare(a: Sequence[float], b: Sequence[float], tie: float) -> str:
    """How the runs ``a`` compare with the runs ``b`` (see the module docstring)."""
    if len(a) >= 2 and len(b) >= 2:
        everything = [*a, *b]
        if max(everything) <= min(everything) * (1 + tie):
            return TIED
    if len(a) >= MIN_RUNS and len(b) >= MIN_RUNS:
        if min(a) > max(b):
            return FASTER
        if min(b) > max(a):
            return SLOWER
    return UNDECIDED


def flipped(rounds: Sequence[tuple[float, float]]) -> bool:
    """Whether, over rounds of (a, b) measured side by side, each of the two won at least once."""
    return any(x > y for x, y in rounds) and any(y > x for x, y in rounds)


def median(rates: Sequence[float]) -> float:
    """The median of the runs (0.0 without runs)."""
    return statistics.median(rates) if rates else 0.0
