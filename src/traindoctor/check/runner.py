"""Check many files: from the cache where nothing changed, the rest on all cores.

The parent process reads every file, asks the cache, and hands the misses to a pool of worker
processes (each builds its rules once) in chunks; results come back in input order, so the
output is the same whatever the number of jobs. Small runs stay in-process: starting workers
costs more than it saves. The automatic number of jobs is the cores other programs leave idle
(:func:`automatic_jobs`): each worker summarises the project modules its files import again, so a
worker that must share its core with another program costs more than it brings. Workers never write files and never touch the cache: the parent does
both, so a crash of a worker can lose speed but never data. If the pool cannot be started or
breaks, the remaining files are checked in-process.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from traindoctor.check.cache import Cache, content_hash
from traindoctor.check.checkfile import FileOutcome, check_file
from traindoctor.check.engine import instantiate
from traindoctor.config import Settings
from traindoctor.finding import Finding
from traindoctor.machine import load_average, usable_cores
from traindoctor.rules.base import Rule

if TYPE_CHECKING:  # pragma: no cover
    from multiprocessing.context import BaseContext

#: Below this much source in total, an automatic ``--jobs`` stays in-process.
PARALLEL_MIN_BYTES = 256 * 1024


@dataclass(frozen=True)
class CheckOptions:
    """How :func:`check_many` checks the files: fix them (``--fix``, ``--unsafe-fixes``), show the
    fixes as a diff (``--diff``), on how many worker processes (``--jobs``)."""

    fix: bool = False
    unsafe_fixes: bool = False
    diff: bool = False
    #: Worker processes; 0 means one per usable core (and in-process for small runs).
    jobs: int = 0


def automatic_jobs(total_bytes: int, cores: int | None = None, load: float | None = -1.0) -> int:
    """Worker processes for ``--jobs 0`` (the default): 1 for small runs, else the usable cores
    other programs leave idle (the one-minute load average subtracted, rounded), at least 1.

    Workers repeat part of the work (each summarises the project modules its files import), about
    15-20% more CPU on torch's sources, so a worker gains only where it has a core to itself; on
    a busy machine the default stays in-process and is never slower than ``--jobs 1``."""
    cores = usable_cores() if cores is None else cores
    if cores < 2 or total_bytes < PARALLEL_MIN_BYTES:
        return 1
    load = load_average() if load == -1.0 else load
    if load is None:
        return cores
    return max(1, min(cores, int(cores - load + 0.5)))


# -- the garbage collector ---------------------------------------------------------------------------
#: Files checked between two full collections while the collector is paused.
COLLECT_EVERY = 256


@contextmanager
def paused_collector() -> Iterator[None]:
    """The cyclic garbage collector off while files are checked, as it was afterwards.

    Parsing allocates millions of AST nodes, and each burst of allocations starts a collection
    that walks every object still alive (the project summaries, the module trees of the file in
    hand): on torch's 2,328 files that was 30% of ``check``'s time. The trees hold no reference
    cycles, so little is left for the collector to find: :func:`checked_one` collects once every
    :data:`COLLECT_EVERY` files."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()  # what :func:`checked_one` froze may be freed again (a long-lived server)
        if was:
            gc.enable()


_CHECKED = [0]


def checked_one() -> None:
    """Count a checked file; a full collection every :data:`COLLECT_EVERY` files."""
    _CHECKED[0] += 1
    if _CHECKED[0] % COLLECT_EVERY == 0:
        gc.collect()
        gc.freeze()  # the survivors are the run's long-lived memos: never walked again


# -- worker side -----------------------------------------------------------------------------------
class _WorkerSetup:
    """What a worker process checks with, set once per process by :func:`_init_worker`."""

    settings: Settings
    options: CheckOptions
    rules: list[Rule]


_WORKER = _WorkerSetup()


def _init_worker(settings: Settings, options: CheckOptions) -> None:
    gc.disable()  # a worker process only checks files: collected by :func:`checked_one`
    _WORKER.settings = settings
    _WORKER.options = options
    _WORKER.rules = instantiate(settings.enabled_codes())


def _check_guarded(
    filename: str, data: bytes, settings: Settings, rules: list[Rule], options: CheckOptions
) -> FileOutcome:
    try:
        return check_file(
            filename, data, settings, rules, fix=options.fix, unsafe_fixes=options.unsafe_fixes, diff=options.diff
        )
    except RecursionError:
        return FileOutcome(filename, [], internal_errors=[f"{filename}: gave up (file too deeply nested)"])
    except Exception as exc:  # a bug of ours: report it, keep the others' results
        return FileOutcome(filename, [], internal_errors=[f"{filename}: {type(exc).__name__}: {exc}"])


def _work(task: tuple[str, bytes]) -> FileOutcome:
    outcome = _check_guarded(task[0], task[1], _WORKER.settings, _WORKER.rules, _WORKER.options)
    checked_one()
    return outcome


# -- parent side -----------------------------------------------------------------------------------
def _pool_context() -> BaseContext:
    import multiprocessing

    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")  # workers inherit the imported rules: fast start
    return multiprocessing.get_context()


def _parallel(
    tasks: list[tuple[str, bytes]], settings: Settings, options: CheckOptions, jobs: int
) -> list[FileOutcome]:
    from concurrent.futures import ProcessPoolExecutor  # imported only when workers are used

    chunk = max(1, min(16, len(tasks) // (jobs * 4) or 1))
    with ProcessPoolExecutor(
        max_workers=jobs, mp_context=_pool_context(), initializer=_init_worker, initargs=(settings, options)
    ) as pool:
        return list(pool.map(_work, tasks, chunksize=chunk))


def _may_start_processes() -> bool:
    """Not from a daemonic process (a multiprocessing worker): it may not have children."""
    import multiprocessing

    return not multiprocessing.current_process().daemon


def check_many(
    items: Sequence[tuple[str, bytes]],
    settings: Settings,
    options: CheckOptions = CheckOptions(),
    cache: Cache | None = None,
    rules: list[Rule] | None = None,
) -> list[FileOutcome]:
    """Outcomes for ``(filename, bytes)`` items, in the items' order."""
    outcomes: list[FileOutcome | None] = [None] * len(items)
    digests: list[str] = [""] * len(items)
    keys: list[str] = [""] * len(items)
    todo: list[int] = []
    used_cache = cache if cache is not None and not options.fix and not options.diff else None
    for i, (filename, data) in enumerate(items):
        if used_cache is not None:
            digests[i] = content_hash(data)
            keys[i] = os.path.abspath(filename)
            found = used_cache.lookup(keys[i], digests[i], filename)
            if found is not None:
                outcomes[i] = FileOutcome(filename, found, cached=True)
                continue
        todo.append(i)

    tasks = [items[i] for i in todo]
    jobs = options.jobs or automatic_jobs(sum(len(d) for _, d in tasks))
    worth_it = len(tasks) > 1
    results: list[FileOutcome] | None = None
    if jobs > 1 and worth_it and _may_start_processes():
        from concurrent.futures.process import BrokenProcessPool

        try:
            results = _parallel(tasks, settings, options, min(jobs, len(tasks)))
        except (OSError, BrokenProcessPool, RuntimeError, AssertionError):
            results = None  # no processes here (sandbox, limits): check in-process
    if results is None:
        rules = rules if rules is not None else instantiate(settings.enabled_codes())
        results = []
        with paused_collector():
            for name, data in tasks:
                results.append(_check_guarded(name, data, settings, rules, options))
                checked_one()

    for i, outcome in zip(todo, results):
        outcomes[i] = outcome
        if used_cache is not None and not outcome.internal_errors:
            used_cache.store(keys[i], digests[i], outcome.findings, outcome.dependencies)
    return drop_echoes([o for o in outcomes if o is not None])


def drop_echoes(outcomes: list[FileOutcome]) -> list[FileOutcome]:
    """Leave out a finding that cites, as its related place, a finding of the same code this
    run reports itself: one mistake, one finding. ``train.py:376`` calling a helper of
    ``engine.py`` whose deprecated ``torch.cuda.amp.autocast`` is reported at ``engine.py:91``
    is the same mistake; checked alone (``check train.py``, the editor), ``train.py`` keeps its
    finding, since nothing else says it. Runs after the cache: each file's entry keeps all its
    findings, whatever else a run checks."""
    reported = {
        (os.path.realpath(f.filename), f.location.row, f.code)
        for o in outcomes
        for f in o.findings
        if f.location is not None
    }

    def echo(f: Finding) -> bool:
        return any(
            r.location is not None and (os.path.realpath(r.filename), r.location.row, f.code) in reported
            for r in f.related
        )

    out = []
    for o in outcomes:
        kept = [f for f in o.findings if not (f.related and echo(f))]
        out.append(o if len(kept) == len(o.findings) else replace(o, findings=kept))
    return out
