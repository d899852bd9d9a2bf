"""DataLoader probe: how loaders are built, and how long the loop waits for each batch.

Patches three attributes (restored on uninstall):

* ``DataLoader.__init__``: records the construction (workers, pinning, persistence, batch size,
  dataset type and length, where in the user's code it was built) in a :class:`LoaderInfo`;
* ``DataLoader.__iter__``: an epoch starts; notes whether worker processes are (re)spawned;
* ``_BaseDataLoaderIter.__next__``: times each batch the loop asks for (the data wait).

The per-batch path is two ``perf_counter`` calls, one dict lookup and a few additions. The CPU
time of ``next()`` (``thread_time``, a system call) is read only for a sample of the batches of
main-process loaders (:func:`samples_cpu`): inside a training step a system call costs about
ten times what it costs in a tight loop (the kernel entry evicts the step's cached state), and
the pipeline model needs the CPU cost per batch, not every batch's. With it, the same sampled
batches read the training thread's time queued for a core (``/proc/thread-self/schedstat``, one
``pread``: :mod:`traindoctor.runtime.sched`), so that a loader on a busy machine is not taken for
one that waits on I/O; a loader with workers reads its workers' schedstat every
:data:`WORKER_CPU_EVERY` batches. Nothing is stored on the
user's loader, dataset or iterator objects. The wrapper's own work around the timed call (and the
doctor's work nested in it) is the doctor's (:mod:`traindoctor.runtime.step_timer`), not data wait.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.live import Site, user_site
from traindoctor.runtime.probes.base import Probe
from traindoctor.runtime.records import LoaderInfo
from traindoctor.runtime.sched import ThreadSched

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session

#: ``next()``'s CPU time is read for every N-th batch of a main-process loader (its first, ...).
CPU_SAMPLE_EVERY = 8
#: The workers' schedstat (``/proc``) is read for every N-th batch of a loader with workers.
WORKER_CPU_EVERY = 8


def samples_cpu(info: LoaderInfo) -> bool:
    """Whether the next batch of ``info`` has its CPU time read: only for main-process loaders
    (a worker's CPU is not seen from here), their 1st, 9th, 17th, ... batch. Counted per loader
    object, so a loop that builds a new ``DataLoader`` every epoch samples each epoch's 1st, 9th,
    ... batch too: an epoch's first batch costs the same CPU as the others without workers."""
    return info.num_workers == 0 and info.batches % CPU_SAMPLE_EVERY == 0


def _qualname(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" else cls.__qualname__


class DataLoaderProbe(Probe):
    """Times batch fetching and records every DataLoader's configuration."""

    name = "dataloader"
    order = 10

    def __init__(self) -> None:
        super().__init__()
        self._sched: ThreadSched | None = None
        self._infos: dict[int, LoaderInfo] = {}
        self._iters: dict[int, tuple[weakref.ReferenceType[Any], LoaderInfo]] = {}
        self._worker_iters: dict[int, tuple[weakref.ReferenceType[Any], int]] = {}
        self._next_id = 1

    def install(self, session: Session) -> None:
        super().install(session)
        from torch.utils.data import dataloader as dl

        self.patch(dl.DataLoader, "__init__", self._wrap_init)
        self.patch(dl.DataLoader, "__iter__", self._wrap_iter)
        self.patch(dl._BaseDataLoaderIter, "__next__", self._wrap_next)

    def uninstall(self) -> None:
        super().uninstall()
        if self._sched is not None:
            self._sched.close()

    # ---------------------------------------------------------------- wrappers
    def _wrap_init(self, orig: Callable[..., None]) -> Callable[..., None]:
        probe = self

        @functools.wraps(orig)
        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            orig(loader, *args, **kwargs)
            try:
                if probe._lookup(loader) is None:
                    probe._register(loader, user_site(2), late=False)
            except Exception as exc:
                probe.fail("DataLoader.__init__", exc)

        return __init__

    def _wrap_iter(self, orig: Callable[[Any], Any]) -> Callable[[Any], Any]:
        probe = self

        @functools.wraps(orig)
        def __iter__(loader: Any) -> Any:
            t0 = time.perf_counter()
            spawned = False
            try:
                workers = int(getattr(loader, "num_workers", 0) or 0)
                if workers > 0:
                    reuse = bool(getattr(loader, "persistent_workers", False)) and (
                        getattr(loader, "_iterator", None) is not None
                    )
                    spawned = not reuse
            except Exception as exc:
                probe.fail("DataLoader.__iter__", exc)
            iterator = orig(loader)
            try:
                probe._iter_started(loader, iterator, t0, spawned)
            except Exception as exc:
                probe.fail("DataLoader.__iter__", exc)
            return iterator

        return __iter__

    def _wrap_next(self, orig: Callable[[Any], Any]) -> Callable[[Any], Any]:
        probe = self
        iters = self._iters
        perf = time.perf_counter
        cpu = time.thread_time
        sched = self._sched = ThreadSched()
        session = self.watched
        timer = session.timer
        from traindoctor.runtime.phases import PHASE_DATA

        @functools.wraps(orig)
        def __next__(iterator: Any) -> Any:
            entered = perf()
            entry = iters.get(id(iterator))
            info = entry[1] if entry is not None and entry[0]() is iterator else None
            sample = info is not None and samples_cpu(info)
            c0 = cpu() if sample else 0.0
            q0 = sched.read() if info is not None and info.batches % CPU_SAMPLE_EVERY == 0 else None
            phase = timer.phase
            timer.phase = PHASE_DATA
            clock = session.device_timer  # GPU runs: mark the phase on the device's stream
            timed = clock is not None and clock.timing
            if timed and clock is not None:
                clock.mark(PHASE_DATA)
            inner = timer.self_total
            t0 = perf()
            try:
                batch = orig(iterator)
            except StopIteration:
                # The epoch's last call: its time (a worker loader joins its workers here) is
                # data wait; the doctor's end-of-epoch bookkeeping after it is its own.
                t1 = perf()
                timer.phase = phase
                if timed and clock is not None and clock.timing:
                    clock.mark(phase)
                if info is not None:
                    timer.add_data_wait(t1 - t0 - (timer.self_total - inner), t1)
                probe._exhausted(iterator)
                timer.self_total += t0 - entered + perf() - t1
                raise
            except BaseException:
                timer.phase = phase
                raise
            t1 = perf()
            wait = t1 - t0 - (timer.self_total - inner)
            if timed and clock is not None and clock.timing:
                clock.mark(phase)
            if sample and info is not None:
                info.wait_cpu_s += cpu() - c0
                info.cpu_batches += 1
            if q0 is not None and info is not None:
                q1 = sched.read()
                if q1 is not None:
                    info.wait_queued_s += q1[1] - q0[1]
                    info.queued_batches += 1
            timer.phase = phase
            if info is not None:
                try:
                    info.add_batch(wait, t1)
                    session.record_batch(info, batch, wait, t1)
                    if info.num_workers and info.batches % WORKER_CPU_EVERY == 0:
                        info.worker_cpu.read(info.batches)
                except Exception as exc:
                    probe.fail("batch", exc)
            timer.self_total += t0 - entered + perf() - t1
            return batch

        return __next__

    # ---------------------------------------------------------------- bookkeeping
    def _lookup(self, loader: Any) -> LoaderInfo | None:
        info = self._infos.get(id(loader))
        if info is not None and info.loader is loader:
            return info
        return None

    def _register(self, loader: Any, site: Site | None, late: bool) -> LoaderInfo:
        from torch.utils.data import IterableDataset

        dataset: Any = getattr(loader, "dataset", None)  # the user's dataset (or None)
        try:
            length = len(dataset)
        except Exception:
            length = None
        key = id(loader)
        infos = self._infos

        def forget(_ref: Any, key: int = key) -> None:
            infos.pop(key, None)

        try:
            dataset_ref = weakref.ref(dataset) if dataset is not None else None
        except TypeError:
            dataset_ref = None
        sampler = getattr(loader, "batch_sampler", None)
        inner = getattr(sampler, "sampler", None) if sampler is not None else None
        info = LoaderInfo(
            id=self._next_id,
            num_workers=int(getattr(loader, "num_workers", 0) or 0),
            pin_memory=bool(getattr(loader, "pin_memory", False)),
            persistent_workers=bool(getattr(loader, "persistent_workers", False)),
            batch_size=getattr(loader, "batch_size", None),
            prefetch_factor=getattr(loader, "prefetch_factor", None),
            drop_last=bool(getattr(loader, "drop_last", False)),
            dataset_type=_qualname(dataset),
            dataset_len=length,
            iterable_dataset=isinstance(dataset, IterableDataset),
            sampler_type=_qualname(inner if inner is not None else sampler),
            filename=site[0] if site else "",
            row=site[1] if site else None,
            loader_ref=weakref.ref(loader, forget),
            dataset_ref=dataset_ref,
            seen_late=late,
            column=getattr(site, "column", None),
        )
        self._next_id += 1
        infos[key] = info
        self.watched.add_loader(info)
        return info

    def _iter_started(self, loader: Any, iterator: Any, t0: float, spawned: bool) -> None:
        info = self._lookup(loader)
        if info is None:  # built before the watch started
            info = self._register(loader, user_site(3), late=True)
        key = id(iterator)
        iters = self._iters

        session = self.watched

        def forget(_ref: Any, key: int = key, info: LoaderInfo = info) -> None:
            iters.pop(key, None)
            session.loader_done(info)  # an eval loop that broke off

        iters[key] = (weakref.ref(iterator, forget), info)
        if info.num_workers > 0:
            workers = self._worker_iters

            def forget_workers(_ref: Any, key: int = key) -> None:
                workers.pop(key, None)

            workers[key] = (weakref.ref(iterator, forget_workers), info.num_workers)
        live = 0
        for ref, count in list(self._worker_iters.values()):
            it = ref()
            if it is not None and not getattr(it, "_shutdown", True):
                live += count
        info.concurrent_workers = live
        info.max_concurrent_workers = max(info.max_concurrent_workers, live)
        if spawned:
            pids = tuple(int(w.pid) for w in getattr(iterator, "_workers", ()) if getattr(w, "pid", None))
            info.worker_cpu.start(pids, info.batches)
        info.open_epoch(t0, spawned)
        session.emit("on_loader_iter_start", info)

    def _exhausted(self, iterator: Any) -> None:
        try:
            entry = self._iters.pop(id(iterator), None)
            if entry is not None and entry[0]() is iterator:
                info = entry[1]
                info.close_epoch()
                session = self.watched
                session.loader_done(info)
                session.emit("on_loader_iter_end", info)
        except Exception as exc:
            self.fail("end of epoch", exc)
