"""Child process of ``traindoctor tune SCRIPT``: run the user's script for one bounded trial.

``python -m traindoctor.tune._trial SPEC.json SCRIPT [ARGS...]``

The script runs as ``__main__`` under the doctor's session (its step timer gives each optimizer
step's samples and data wait), in the trial's view of the user's folder (``SPEC["view"]``, the view
of ``SPEC["project"]``) inside the sandbox the tuner started it in, with the sandbox's guard
installed (:mod:`traindoctor.sandbox.guard`: Python's writes land on private copies). Locations
(the training DataLoader's line) are reported and matched as the user's paths, not the view's.
Then, depending on ``SPEC["mode"]``:

* ``trial``: DataLoaders built at the training loader's line get the configuration's
  ``num_workers`` / ``prefetch_factor`` / ``persistent_workers`` (/ ``pin_memory``), and the
  process gets ``torch_threads`` intra-op threads (the script's own ``torch.set_num_threads``
  calls are ignored); after warm-up steps, steady steps are timed until ``seconds`` have passed
  (at least 3, at most ``max_steps``), then the script is stopped;
* ``whole``: the configuration is applied as in ``trial``, and the script runs to its end
  (nothing is stopped or timed in it; ``samples_seen`` counts what its optimizer steps trained):
  how ``benchmarks/tune_quality.py`` compares configurations as whole processes;
* ``probe``: the script's own configuration is timed the same way (the baseline), which also
  identifies the training loader (the one whose batches the steps consumed). Then, without
  leaving the step, the loader is measured *alone* for each worker count of
  ``loader_workers`` (fresh DataLoaders with the script's own arguments, nothing else running),
  and finally the loop goes on with the last batches replayed from memory (no loading at all)
  for each thread count of ``threads``: the two bounds of the pipeline.

The script is stopped by raising :class:`TrialComplete` (a ``BaseException``, so ``except
Exception`` in the script does not swallow it) from the optimizer's step hook. The result is
written as JSON to ``SPEC["out"]``.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from traindoctor.facts.data.pipeline import TIE
from traindoctor.runtime.script import ScriptRunner
from traindoctor.sandbox.view import View

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.records import LoaderInfo
    from traindoctor.runtime.session import Session
    from traindoctor.runtime.step_timer import StepRecord

#: Steps kept out of every measurement after a change (start-up, allocator growth, lazy init).
BASE_WARMUP = 2
MIN_STEPS = 3
#: Batches replayed in the compute bound.
REPLAY_BATCHES = 4


def warmup_steps(workers: int, prefetch: int) -> int:
    """Steps kept out of a measurement of ``workers`` workers: :data:`BASE_WARMUP`, plus the
    batches the workers buffered during start-up (they arrive at once)."""
    return BASE_WARMUP + min(workers * prefetch, 16)


def steps_needed(workers: int, prefetch: int, timed: int) -> int:
    """Optimizer steps a trial needs for ``timed`` timed steps: the warm-up, the step that starts
    the clock, the timed ones."""
    return warmup_steps(workers, prefetch) + 1 + timed


#: Modes that apply ``SPEC["config"]`` to the training loader and the intra-op threads.
OVERRIDING = ("trial", "whole")


class TrialComplete(BaseException):
    """Raised from the step hook once the trial has what it needs."""


class Controller:
    """State of one trial: what to override, and the measurement state machine."""

    def __init__(self, spec: dict[str, Any]) -> None:
        import torch
        from torch.utils.data import dataloader as dl

        self.torch = torch
        self.spec = spec
        self.mode: str = spec["mode"]
        self.config: dict[str, Any] | None = spec.get("config")
        site = spec.get("site")
        self.site = tuple(site) if site else None
        self.view = View(spec["project"], spec["view"]) if spec.get("view") else None
        self.seconds = float(spec.get("seconds", 1.0))
        self.max_steps = int(spec.get("max_steps", 50))
        self.main_pid = os.getpid()
        self.orig_init = dl.DataLoader.__init__
        self.orig_iter = dl.DataLoader.__iter__
        self.orig_next = dl._BaseDataLoaderIter.__next__
        self.real_set_threads = torch.set_num_threads
        self.signature = inspect.signature(self.orig_init)
        self.loaders: dict[int, dict[str, Any]] = {}
        self.batch_counts: dict[int, int] = {}
        #: ``LoaderInfo.id`` -> ``id()`` of its loader, the key of ``loaders``.
        self.loader_keys: dict[int, int] = {}
        self.caches: dict[int, deque[Any]] = {}
        self.replay_dataset: Any = None
        self.replay_index = 0
        self.segments: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.session: Session | None = None
        self.script_threads: int | None = None
        self.training: dict[str, Any] | None = None
        self.steps_seen = 0
        self.samples_seen = 0
        self.seg: dict[str, Any] | None = None
        self.pending: list[dict[str, Any]] = []
        self.done = False

    # ---------------------------------------------------------------- patches
    def install(self) -> None:
        from torch.utils.data import dataloader as dl

        ctl = self
        orig_init, orig_next = self.orig_init, self.orig_next

        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            try:
                from traindoctor.runtime.live import user_site

                bound = ctl.signature.bind(loader, *args, **kwargs)
                arguments = {k: v for k, v in bound.arguments.items() if k != "self"}
                site = ctl.user_path(user_site(2))
                if ctl.mode in OVERRIDING and ctl.config is not None and _same_site(site, ctl.site):
                    arguments = apply_config(arguments, ctl.config)
                ctl.loaders[id(loader)] = {"args": arguments, "site": site}
            except Exception:  # fail-open: an exotic call is left alone
                return orig_init(loader, *args, **kwargs)
            return orig_init(loader, **arguments)

        def __next__(iterator: Any) -> Any:
            dataset = getattr(iterator, "_dataset", None)
            if ctl.replay_dataset is not None and dataset is ctl.replay_dataset:
                cache = ctl.caches.get(id(dataset))
                if cache:
                    ctl.replay_index += 1
                    return cache[ctl.replay_index % len(cache)]
            batch = orig_next(iterator)
            if ctl.mode == "probe" and dataset is not None:
                cache = ctl.caches.get(id(dataset))
                if cache is None:
                    cache = ctl.caches[id(dataset)] = deque(maxlen=REPLAY_BATCHES)
                cache.append(batch)
            return batch

        dl.DataLoader.__init__ = __init__  # type: ignore[method-assign, assignment]  # a wrapper in torch's place
        dl._BaseDataLoaderIter.__next__ = __next__  # type: ignore[method-assign, assignment]  # a wrapper in torch's place

        if self.mode in OVERRIDING and self.config is not None and self.config.get("torch_threads"):
            self.real_set_threads(int(self.config["torch_threads"]))
            real = self.real_set_threads

            def set_num_threads(n: int) -> None:
                if os.getpid() != ctl.main_pid:  # DataLoader workers set 1 thread: let them
                    real(n)

            self.torch.set_num_threads = set_num_threads  # type: ignore[assignment]  # a wrapper in torch's place

    def user_path(self, site: Any) -> tuple[str, int] | None:
        """A (filename, line) of the view as the user's file."""
        if site is None:
            return None
        return (self.view.to_user(site[0]) if self.view is not None else site[0], site[1])

    def attach(self, session: Session) -> None:
        self.session = session
        session.add_step_listener(self.on_step)
        session.add_batch_observer(self.on_batch)

    def on_batch(self, info: LoaderInfo, batch: Any) -> None:
        if self.seg is not None and self.seg["phase"] in ("baseline", "search"):
            self.batch_counts[info.id] = self.batch_counts.get(info.id, 0) + 1
            if info.id not in self.loader_keys:  # while the loader lives: a short script may end
                self.loader_keys[info.id] = id(info.loader)  # and free it before it is identified

    # ---------------------------------------------------------------- measuring
    def _warmup(self) -> int:
        workers, prefetch = 0, 2
        if self.mode == "trial" and self.config is not None:
            workers = int(self.config.get("num_workers", 0))
            prefetch = int(self.config.get("prefetch_factor") or 2)
        elif self.session is not None:
            used = [i for i in self.session.loaders if i.batches]
            if used:
                info = max(used, key=lambda i: i.batches)
                workers, prefetch = info.num_workers, int(info.prefetch_factor or 2)
        return warmup_steps(workers, prefetch)

    def _open(self, phase: str, config: dict[str, Any] | None, warm: int) -> None:
        self.seg = {
            "phase": phase,
            "config": config,
            "warm_left": warm,
            "steps": 0,
            "samples": 0,
            "data_s": 0.0,
            "wall_s": 0.0,
            "t0": None,
            "cpu0": None,
        }

    def on_step(self, record: StepRecord) -> None:
        self.steps_seen += 1
        if self.mode == "whole":  # the script runs to its end: only count what it trained
            self.samples_seen += record.samples
            return
        if self.script_threads is None:
            self.script_threads = int(self.torch.get_num_threads())
        if self.done:
            raise TrialComplete
        if self.seg is None:
            phase = "baseline" if self.mode == "probe" else "search"
            self._open(phase, self.config, self._warmup() - 1)
            return
        seg = self.seg
        if seg["warm_left"] > 0:
            seg["warm_left"] -= 1
            return
        if seg["t0"] is None:
            seg["t0"] = self._drained(record.end)
            seg["cpu0"] = time.process_time()
            return
        seg["steps"] += 1
        seg["samples"] += record.samples
        seg["data_s"] += record.data_s
        seg["wall_s"] += record.wall_s
        seg["last"] = record.end
        elapsed = record.end - seg["t0"]
        if seg["steps"] >= self.max_steps or (elapsed >= self.seconds and seg["steps"] >= MIN_STEPS):
            self._close(self._drained(record.end))
            self._next_stage()

    def _drained(self, host_time: float) -> float:
        """The time the device had run everything queued so far: ``host_time`` on a CPU run. CUDA
        runs asynchronously, so a loop that never waits for the device ends its steps when their
        kernels are queued, not run; a window timed from the host alone would count steps the
        device had not run. Both ends of a timed window wait for the device (a script that has not
        initialised CUDA is never made to)."""
        cuda = getattr(self.torch, "cuda", None)
        try:
            if cuda is None or not cuda.is_initialized():
                return host_time
            cuda.synchronize()
        except Exception:  # fail-open: the host's clock
            return host_time
        return time.perf_counter()

    def _close(self, t_end: float | None = None) -> None:
        seg = self.seg
        self.seg = None
        if seg is None or seg["t0"] is None or seg["steps"] < 1:
            return
        end = t_end if t_end is not None else seg.get("last", time.perf_counter())
        elapsed = max(end - seg["t0"], 1e-9)
        cpu = time.process_time() - seg["cpu0"]
        self.segments.append(
            {
                "phase": seg["phase"],
                "config": seg["config"],
                "steps": seg["steps"],
                "samples": seg["samples"],
                "seconds": elapsed,
                "samples_per_s": seg["samples"] / elapsed if seg["samples"] else None,
                "data_wait_share": seg["data_s"] / seg["wall_s"] if seg["wall_s"] > 0 else None,
                "cpu_s_per_sample": cpu / seg["samples"] if seg["samples"] else None,
            }
        )

    def _next_stage(self) -> None:
        if self.mode == "trial":
            self.done = True
            raise TrialComplete
        if self.training is None:  # the baseline just ended: find the training loader, bound it
            self._identify_training_loader()
            if self.training is None:
                self.done = True
                raise TrialComplete
            self._loader_bounds()
            self.replay_dataset = self.training["dataset"]
            self.pending = [{"torch_threads": t} for t in self.spec.get("threads", [])]
        if not self.pending:
            self.done = True
            raise TrialComplete
        config = self.pending.pop(0)
        self.real_set_threads(int(config["torch_threads"]))
        self._open("bound-compute", dict(self.training["config"], **config), BASE_WARMUP - 1)

    def _identify_training_loader(self) -> None:
        if not self.batch_counts or self.session is None:
            self.notes.append("no DataLoader batch was consumed by the training steps")
            return
        info_id = max(self.batch_counts, key=lambda k: self.batch_counts[k])
        info = next((i for i in self.session.loaders if i.id == info_id), None)
        loader = info.loader if info is not None else None
        key = id(loader) if loader is not None else self.loader_keys.get(info_id)
        entry = self.loaders.get(key) if key is not None else None
        if info is None or entry is None:
            self.notes.append("the training DataLoader could not be identified")
            return
        config: dict[str, Any] = {"num_workers": info.num_workers}
        if info.num_workers > 0:
            config["persistent_workers"] = info.persistent_workers
            config["prefetch_factor"] = info.prefetch_factor or 2
        if info.pin_memory:
            config["pin_memory"] = True
        config["torch_threads"] = self.script_threads
        self.training = {
            "args": entry["args"],
            "site": entry["site"],
            "config": config,
            "dataset": loader.dataset if loader is not None else None,
            "batch_size": info.batch_size,
            "dataset_len": info.dataset_len,
            "iterable": info.iterable_dataset,
        }

    def _loader_bounds(self) -> None:
        assert self.training is not None
        best: list[float] = []
        stalls = 0
        for workers in self.spec.get("loader_workers", []):
            config = {"num_workers": workers}
            if workers > 0:
                config.update(persistent_workers=True, prefetch_factor=2)
            try:
                rate, cpu, queued = self._measure_loader(config)
            except Exception as exc:  # a dataset that cannot be loaded by workers
                self.notes.append(f"loader alone with num_workers={workers} failed: {_short(exc)}")
                break
            self.segments.append(
                {
                    "phase": "bound-loader",
                    "config": config,
                    "samples_per_s": rate,
                    "data_wait_share": None,
                    "cpu_s_per_sample": cpu,
                    "queued_s_per_sample": queued,
                }
            )
            if rate is None:
                continue
            stalls = stalls + 1 if best and rate < max(best) * (1 + TIE) else 0
            best.append(rate)
            if stalls >= 2:  # two worker counts in a row without gain: the loader has saturated
                break

    def _measure_loader(self, config: dict[str, Any]) -> tuple[float | None, float | None, float | None]:
        """(samples/s, CPU seconds per sample, seconds per sample queued for a core) of the
        loader alone; the queued time (``/proc/thread-self/schedstat``) only without workers."""
        from torch.utils.data import DataLoader

        from traindoctor.runtime.sched import ThreadSched
        from traindoctor.runtime.steps import batch_samples

        assert self.training is not None
        args = apply_config(dict(self.training["args"]), config)
        loader = DataLoader.__new__(DataLoader)
        self.orig_init(loader, **args)
        workers = config["num_workers"]
        iterator = None
        try:

            def fetch() -> Any:
                nonlocal iterator
                for _ in range(2):
                    if iterator is None:
                        iterator = self.orig_iter(loader)
                    try:
                        return self.orig_next(iterator)
                    except StopIteration:
                        iterator = None
                raise RuntimeError("the loader produced no batch")

            for _ in range(1 + workers * 2):
                fetch()
            samples, batches = 0, 0
            sched = ThreadSched()
            q0 = sched.read() if workers == 0 else None
            t0, cpu0 = time.perf_counter(), time.process_time()
            while True:
                samples += batch_samples(fetch())
                batches += 1
                elapsed = time.perf_counter() - t0
                if batches >= 500 or (elapsed >= self.seconds and batches >= MIN_STEPS):
                    break
            cpu = time.process_time() - cpu0
            q1 = sched.read() if q0 is not None else None
            sched.close()
            if not samples:
                return None, None, None
            queued = (q1[1] - q0[1]) / samples if q0 is not None and q1 is not None else None
            return samples / elapsed, cpu / samples, queued
        finally:
            for it in (iterator, getattr(loader, "_iterator", None)):
                shutdown = getattr(it, "_shutdown_workers", None)
                if callable(shutdown):
                    shutdown()

    # ---------------------------------------------------------------- result
    def result(self, status: str, error: str | None) -> dict[str, Any]:
        if self.seg is not None:  # the script ended during a measurement: keep what it has
            self._close()
        if self.mode == "probe" and self.training is None and self.segments:
            self._identify_training_loader()  # the script ended during the baseline
        training = None
        if self.training is not None:
            site = self.training["site"]
            training = {
                "site": list(site) if site else None,
                "config": self.training["config"],
                "batch_size": self.training["batch_size"],
                "dataset_len": self.training["dataset_len"],
                "iterable": self.training["iterable"],
            }
        elif self.mode == "probe" and self.session is not None and self.session.loaders:
            self.notes.append("the script ended before the baseline was measured")
        from traindoctor.machine import usable_cores

        return {
            "status": status,
            "error": error,
            "mode": self.mode,
            "segments": self.segments,
            "steps_seen": self.steps_seen,
            "samples_seen": self.samples_seen,
            "script_threads": self.script_threads,
            "training_loader": training,
            "cores": usable_cores(),
            "notes": self.notes,
            "uses_cuda": bool(getattr(self.session, "uses_cuda", False)),
        }


def apply_config(arguments: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """DataLoader keyword arguments with a configuration's loader settings applied."""
    out = dict(arguments)
    workers = int(config.get("num_workers", out.get("num_workers", 0)) or 0)
    out["num_workers"] = workers
    if workers > 0:
        out["persistent_workers"] = bool(config.get("persistent_workers", True))
        out["prefetch_factor"] = int(config.get("prefetch_factor") or 2)
    else:
        out["persistent_workers"] = False
        out["prefetch_factor"] = None
    if "pin_memory" in config:
        out["pin_memory"] = bool(config["pin_memory"])
    return out


def _same_site(site: Any, target: Any) -> bool:
    if target is None:
        return True
    return site is not None and os.path.abspath(site[0]) == os.path.abspath(target[0]) and site[1] == target[1]


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1]}" if text else type(exc).__name__


def _stop_workers() -> None:
    """Shut down the DataLoader worker processes the stopped script left behind."""
    import gc

    from torch.utils.data import dataloader as dl

    iterator = dl._MultiProcessingDataLoaderIter
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance reads ``obj.__class__``, and some objects (torch's
        # deprecated ``torch.distributed.reduce_op``) warn when their attributes are read
        if issubclass(type(obj), iterator):
            try:
                obj._shutdown_workers()
            except Exception:
                pass


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    spec = json.loads(open(argv[0], encoding="utf-8").read())
    script, args = argv[1], argv[2:]
    out = spec["out"]

    from traindoctor.sandbox.guard import install_from_env

    install_from_env()
    controller = Controller(spec)
    controller.install()
    from traindoctor.doctor.watch import doctor_session

    session = doctor_session(monitors=[])
    controller.attach(session)
    session.start()
    try:  # the script's own error is printed as Python would (it goes to the trial log)
        outcome = ScriptRunner(script, args, stops={TrialComplete: 0}).run()
    finally:
        sys.stdout.flush()
        session.stop()
    status, error = "ended", None
    if isinstance(outcome.error, TrialComplete):
        status = "complete"
    elif outcome.error is not None:
        status, error = "failed", _short(outcome.error)
    elif outcome.code != 0:
        status, error = "failed", f"the script exited with status {outcome.code}"
    result = controller.result(status, error)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(result, fh)
    _stop_workers()
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown (worker processes, atexit handlers of the script): the trial is
    # over and its result written.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
