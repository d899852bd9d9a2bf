"""Which configuration ``tune SCRIPT`` recommends, from repeated runs of its finalists.

Pure functions on ``{configuration key: [samples/s of each run]}``, so that the choice can be
tested without running anything:

* :func:`choose_finalists`: the fastest of the search, the runner-up when one run cannot tell it
  from the fastest, the fastest without workers when the fastest has workers, and the script's
  own configuration (the baseline);
* :func:`decided`: whether every finalist's runs are told apart from the fastest's, or tied
  (:func:`traindoctor.tune.repeats.compare`), so that no further round is needed;
  :func:`undecided_minor`: the finalists still undecided against the fastest differ from it only
  in the loader's queue (``prefetch_factor``, ``persistent_workers``), not in the workers and
  threads the advice is about, so more rounds would not change those either;
* :func:`choose`: the simplest finalist (fewest workers, then the script's own thread count) that
  the fastest is not *measured* faster than. A difference the runs do not show (undecided,
  tied, or within the tie margin) is no reason for more processes or another thread count, so
  noise on a busy machine falls back to the simpler setting instead of deciding the advice;
  workers must also beat the best finalist without them by ``gain``, and no more workers than
  the pipeline model's ceiling are recommended (the one TD104 reports above).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from traindoctor.tune.repeats import FASTER, TIED, UNDECIDED, compare, median

#: The runner-up of the search is a finalist when its one run is within this share of the fastest.
RUNNER_UP_SHARE = 0.9

K = TypeVar("K", bound=Hashable)


def choose_finalists(
    runs: Mapping[K, Sequence[float]],
    configs: Mapping[K, Mapping[str, Any]],
    baseline: K,
    most: int,
) -> list[K]:
    """The configurations to confirm (see the module docstring), the fastest first, at most ``most``."""
    ranked = sorted((k for k in runs if k != baseline and runs[k]), key=lambda k: median(runs[k]), reverse=True)
    out: list[K] = ranked[:1]
    if len(ranked) > 1 and median(runs[ranked[1]]) >= median(runs[ranked[0]]) * RUNNER_UP_SHARE:
        out.append(ranked[1])
    if out and configs[out[0]].get("num_workers"):
        plain = [k for k in ranked if not configs[k].get("num_workers")]
        if plain and plain[0] not in out:
            out.append(plain[0])
    out.append(baseline)
    return [*out[:-1][: most - 1], baseline]


def decided(runs: Mapping[K, Sequence[float]], tie: float) -> bool:
    """Whether each finalist is measured faster, slower or tied against the fastest."""
    leader = max(runs, key=lambda k: median(runs[k]))
    return all(compare(runs[leader], runs[k], tie) != UNDECIDED for k in runs if k != leader)


def _major(config: Mapping[str, Any]) -> tuple[int, Any]:
    """What the advice is about: the loader's workers and the intra-op threads."""
    return int(config.get("num_workers", 0) or 0), config.get("torch_threads")


def undecided_minor(runs: Mapping[K, Sequence[float]], configs: Mapping[K, Mapping[str, Any]], tie: float) -> list[K]:
    """The finalists still undecided against the fastest, when each has the fastest's workers and
    threads (only its prefetch factor or persistent workers differ); [] when any undecided one
    differs in workers or threads (more rounds are needed) or none is undecided."""
    leader = max(runs, key=lambda k: median(runs[k]))
    open_ = [k for k in runs if k != leader and compare(runs[leader], runs[k], tie) == UNDECIDED]
    if any(_major(configs[k]) != _major(configs[leader]) for k in open_):
        return []
    return open_


@dataclass
class Choice:
    """The recommended configuration, the fastest one, and how each finalist compared with it."""

    best: Any
    leader: Any
    verdicts: dict[Any, str] = field(default_factory=dict)

    @property
    def undecided(self) -> bool:
        """Whether the fastest was kept from being recommended only by too few runs."""
        return self.best != self.leader and self.verdicts.get(self.best) == UNDECIDED


def choose(
    runs: Mapping[K, Sequence[float]],
    configs: Mapping[K, Mapping[str, Any]],
    script_threads: int,
    tie: float,
    gain: float,
    ceiling: int | Callable[[Mapping[str, Any]], int] | None = None,
) -> Choice:
    """The simplest finalist the fastest is not measured faster than (see the module docstring);
    never one with more workers than ``ceiling`` (:func:`~traindoctor.facts.data.pipeline.worker_ceiling`:
    a number, or the ceiling of a configuration, which depends on its thread count)."""
    measured = [k for k in runs if runs[k]]

    def within(config: Mapping[str, Any]) -> bool:
        most = ceiling(config) if callable(ceiling) else ceiling
        return most is None or int(config.get("num_workers", 0)) <= most

    allowed = [k for k in measured if within(configs[k])]
    if not allowed:
        raise ValueError("no finalist within the worker ceiling has a measurement")
    leader = max(measured, key=lambda k: median(runs[k]))
    verdicts = {k: compare(runs[leader], runs[k], tie) for k in measured if k != leader}

    def beaten(key: K) -> bool:
        return verdicts.get(key) == FASTER and median(runs[leader]) > median(runs[key]) * (1 + tie)

    def simplicity(key: K) -> tuple[int, bool, float]:
        cfg = configs[key]
        return (int(cfg.get("num_workers", 0)), cfg.get("torch_threads") != script_threads, -median(runs[key]))

    best = min((k for k in allowed if not beaten(k)), key=simplicity, default=None)
    if best is None:  # the fastest is above the ceiling and beats every allowed one
        best = max(allowed, key=lambda k: median(runs[k]))
    plain = [k for k in allowed if not configs[k].get("num_workers")]
    if configs[best].get("num_workers") and plain:
        fastest_plain = max(plain, key=lambda k: median(runs[k]))
        if median(runs[fastest_plain]) * gain >= median(runs[best]):
            best = fastest_plain
    return Choice(best, leader, verdicts)


__all__ = ["FASTER", "TIED", "UNDECIDED", "Choice", "choose", "choose_finalists", "decided", "undecided_minor"]
