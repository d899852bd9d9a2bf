"""The watch session: installs the probes, feeds the monitors, builds the profile and report.

A :class:`Session` creates the monitor classes and installs the probe classes it is handed: which
ones is the driver's choice (``traindoctor.watch()``, ``traindoctor run``, the framework callbacks
and ``tune`` trials build sessions in :mod:`traindoctor.doctor.watch`); the session discovers
nothing itself and renders no report (:meth:`Session.report_dict` is the data the reporters read).

The doctor is fail-open: an exception inside a probe or a monitor is recorded in
:attr:`Session.notes` and training goes on (a failing monitor is switched off for the rest of the
run). It never changes the user's objects, tensors or RNG streams: probes only time calls and read
attributes, so a watched run computes bit-for-bit what the unwatched run computes.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable, Iterable, Mapping
from types import CodeType
from typing import TYPE_CHECKING, Any, Literal, Protocol

from traindoctor.finding import Finding, sort_findings
from traindoctor.machine import cpu_snapshot, load_average, usable_cores
from traindoctor.machine import machine_cores as _machine_cores
from traindoctor.runtime.device import DeviceInfo
from traindoctor.runtime.environment import current_dir, relative_filename, run_environment
from traindoctor.runtime.events import Monitor
from traindoctor.runtime.options import training_reference
from traindoctor.runtime.phases import PHASE_OPTIMIZER, PHASE_OTHER
from traindoctor.runtime.profile import Profile, build_profile, default_warmup, measure_memory
from traindoctor.runtime.step_timer import StepRecord, StepTimer
from traindoctor.runtime.steps import (
    MAX_BACKWARD_MARKS,
    NO_OPTIMIZER_BACKWARDS,
    BackwardMark,
    backward_records,
    batch_samples,
)
from traindoctor.runtime.throughput import batch_tokens, has_embedding
from traindoctor.runtime.timeline import session_timeline

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn
    from torch.optim import Optimizer

    from traindoctor.runtime.device_api import DeviceApi
    from traindoctor.runtime.device_time import DeviceTimer
    from traindoctor.runtime.gpu_profile import GpuProfile
    from traindoctor.runtime.gpu_watch import GpuWatch
    from traindoctor.runtime.host_sampler import HostWorkSampler
    from traindoctor.runtime.live import Site
    from traindoctor.runtime.records import LoaderInfo

_ACTIVE_LOCK = threading.Lock()
_ACTIVE: Session | None = None


def active_session() -> Session | None:
    """The session currently watching this process, if any."""
    return _ACTIVE


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class Installable(Protocol):
    """What a session needs of a probe (:class:`traindoctor.runtime.probes.base.Probe` is one)."""

    def applies(self, session: Session) -> bool:
        """Whether the probe is useful for this run."""
        ...

    def install(self, session: Session) -> None:
        """Patch or hook torch for this run."""
        ...

    def uninstall(self) -> None:
        """Undo every patch and hook."""
        ...


class Session:
    """One watched run. Monitors read it as a :class:`~traindoctor.runtime.events.SessionView`
    (``thresholds``, ``step``, ``device``, ``loaders``, ``records``, ...); probes call the
    ``record_*`` methods.
    """

    def __init__(
        self,
        *,
        monitors: Iterable[type[Monitor]] = (),
        probes: Iterable[type[Installable]] = (),
        thresholds: Mapping[str, Any] | None = None,
        device: DeviceInfo | None = None,
        local_world_size: int | None = None,
        cpu_count: int | None = None,
        machine_cores: int | None = None,
        reference_batch: int | None = None,
        reference_lr: float | None = None,
        no_decay: Iterable[str] | str | None = None,
        cuda: DeviceApi | None = None,
    ) -> None:
        """``monitors``: the monitor classes to create at :meth:`start`; ``probes``: the probe
        classes to install then, in this order. ``device``, ``cpu_count``, ``machine_cores`` and
        ``local_world_size`` replace what would be detected, ``cuda`` the CUDA calls (tests: a
        simulated device)."""
        self.thresholds: dict[str, Any] = dict(thresholds or {})
        self.thresholds.update(
            training_reference(reference_batch=reference_batch, reference_lr=reference_lr, no_decay=no_decay)
        )
        self._device_override = device
        self._monitor_classes = list(monitors)
        self._probe_classes = list(probes)

        self.device: DeviceInfo = device or DeviceInfo()
        self.cpu_count: int = cpu_count or usable_cores()
        self.machine_cores: int = machine_cores or _machine_cores()
        #: The machine's 1-minute load average before the script ran: other programs' load
        #: (None where unknown); rules that judge contention stay silent on a busy machine.
        self.load_at_start: float | None = load_average()
        #: The machine's and this process tree's CPU time when the watch started: with a second
        #: snapshot, the cores other programs kept busy during the run (None where unknown).
        self.cpu_at_start = cpu_snapshot()
        self.rank = _env_int("RANK", 0)
        self.world_size = _env_int("WORLD_SIZE", 1)
        self.local_rank = _env_int("LOCAL_RANK", 0)
        self.local_world_size = local_world_size or _env_int("LOCAL_WORLD_SIZE", 1)
        self.uses_cuda = False
        #: The working directory the watch started in: report filenames are relative to it.
        self.start_dir = current_dir()
        self.notes: list[str] = []
        self.monitors: list[Monitor] = []
        self.probes: list[Installable] = []
        self.loaders: list[LoaderInfo] = []
        self.models: weakref.WeakSet[nn.Module] = weakref.WeakSet()
        self._optimizers: list[weakref.ReferenceType[Optimizer]] = []
        self._optimizer_ids: dict[int, weakref.ReferenceType[Optimizer]] = {}
        self.findings: list[Finding] = []
        self.profile: Profile = Profile()
        self.partial = False
        #: Why the report is partial ("interrupted (Ctrl-C)", "the script raised ValueError", ...).
        self.partial_reason = ""
        self.active = False
        self.inert = False  # a nested watch does nothing
        self.step = 0
        #: ``optimizer.step()`` calls so far (all optimizers; counted before the call's events).
        self.optimizer_calls = 0
        self.started_at = 0.0
        self.ended_at = 0.0
        self.timer = StepTimer()
        self._dispatch: dict[str, list[tuple[Monitor, Callable[..., Any]]]] = {}
        self._batch_observers: list[Callable[[LoaderInfo, Any], None]] = []
        self._primary_opt: weakref.ReferenceType[Optimizer] | None = None
        self._other_opt_steps: dict[int, int] = {}
        self._step_listeners: list[Callable[[StepRecord], None]] = []
        self._progress_listeners: list[Callable[[int], None]] = []
        self._mode_listeners: list[Callable[[], None]] = []
        self._loose_batches = 0
        self._loose_samples = 0
        self._loose_wait = 0.0
        self._cuda_override = cuda
        #: The CUDA calls (None on a CPU run: then nothing GPU-side exists); the GPU side of the
        #: watch, and its device timer once the script used the device (the probes' wrappers
        #: mark phase boundaries on it while ``device_timer.timing``).
        self.cuda_api: DeviceApi | None = None
        self.gpu: GpuWatch | None = None
        self.device_timer: DeviceTimer | None = None
        #: The device-time profile and GPU memory, read once before ``on_run_end``.
        self.gpu_profile: GpuProfile | None = None
        self._gpu_memory: dict[str, Any] = {}
        self._optimizer_sites: weakref.WeakKeyDictionary[Optimizer, Site] = weakref.WeakKeyDictionary()
        self._loop_code: CodeType | None = None
        self._loop_code_looked = False
        #: The host-work sampler, once started; ``_sampler_failed`` once starting it failed.
        self._sampler: HostWorkSampler | None = None
        self._sampler_failed = False
        #: The sampler's busy time already counted as the doctor's own (``_count_sampler``).
        self._sampler_counted = 0.0
        self._phase_before_step = PHASE_OTHER
        #: Loaders that delivered a batch since the last backward()/optimizer step (by info id):
        #: the next training call marks them ``feeds_training`` (eval-only loaders never are).
        self._fed: dict[int, LoaderInfo] = {}
        #: Where each backward() ended while no optimizer has stepped (see ``_mark_backward``).
        self._backward_marks: list[BackwardMark] = []
        #: The counted step's (index, FLOPs by precision, samples), once the FLOPs probe counted one.
        self.step_flops: tuple[int, dict[str, int], int] | None = None
        #: The steps the profile was built from (the optimizer's, or one per ``backward()`` in a
        #: loop without one), once the watch ended.
        self.profiled_records: list[StepRecord] = []

    # ---------------------------------------------------------------- public views
    @property
    def records(self) -> list[StepRecord]:
        return self.timer.records

    @property
    def backward_calls_this_step(self) -> int:
        return self.timer.backward_calls

    @property
    def optimizers(self) -> list[Optimizer]:
        """Optimizers seen stepping during the run (still alive), in order of first step."""
        return [o for o in (ref() for ref in self._optimizers) if o is not None]

    # ---------------------------------------------------------------- context manager
    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Literal[False]:
        self.stop(exc_type)
        return False

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Install the probes and monitors. A second, nested session stays inert."""
        global _ACTIVE
        with _ACTIVE_LOCK:
            if _ACTIVE is not None:
                self.inert = True
                self.notes.append("nested watch ignored: another traindoctor watch is active")
                return
            _ACTIVE = self
        self.active = True
        self.started_at = time.perf_counter()
        try:
            if self._device_override is None:
                from traindoctor.runtime.device import detect_device

                self.device = detect_device()
            self._start_gpu()
        except Exception as exc:  # pragma: no cover - torch import trouble
            self.internal_error("device detection", exc)
        self._create_monitors()
        self._install_probes()
        self.emit("on_run_start")

    def stop(self, exc_type: Any = None) -> None:
        """End the watch: run ``on_run_end``, restore torch, build findings and profile."""
        global _ACTIVE
        if self.inert or not self.active:
            return
        if exc_type is not None and not issubclass(exc_type, SystemExit):
            self.mark_partial(
                "the run was interrupted"
                if issubclass(exc_type, KeyboardInterrupt)
                else f"the script raised {exc_type.__name__}"
            )
        self.ended_at = time.perf_counter()
        try:
            self._finish_loaders()
            self._update_distributed()
            if self.gpu is not None:
                self._finish_gpu()
            self.emit("on_run_end")
        finally:
            if self._sampler is not None:
                self._sampler.stop()
            for probe in reversed(self.probes):
                try:
                    probe.uninstall()
                except Exception as exc:  # pragma: no cover - defensive
                    self.internal_error(f"uninstall {type(probe).__name__}", exc)
            self.active = False
            with _ACTIVE_LOCK:
                if _ACTIVE is self:
                    _ACTIVE = None
        self._collect_findings()
        self._build_profile()

    def _start_gpu(self) -> None:
        """Create the GPU side of the watch when the run may use CUDA (never on a CPU run)."""
        api = self._cuda_override
        if api is None and self.device.cuda_available:
            from traindoctor.runtime.device_api import TorchCuda

            api = TorchCuda()
        if api is not None:
            from traindoctor.runtime.gpu_watch import GpuWatch

            self.cuda_api = api
            self.gpu = GpuWatch(api)

    def note_cuda_device(self, device: int | None) -> None:
        """The script put work on ``device`` (None: the current one): time the steps there from
        now on, and read its facts (once, after the script initialised CUDA)."""
        gpu = self.gpu
        if gpu is None or gpu.timer is not None:
            return
        self.uses_cuda = True
        try:
            if gpu.use(device, self.step, self.timer.phase):
                self.device_timer = gpu.timer
                self.device = gpu.device_info(self.device)
        except Exception as exc:  # fail-open: the host profile stays
            self.internal_error("GPU timing", exc)
            self.gpu = None
            self.device_timer = None

    def mark_partial(self, reason: str) -> None:
        """The run did not end normally (first reason wins): the report says so."""
        self.partial = True
        if not self.partial_reason:
            self.partial_reason = reason

    def _create_monitors(self) -> None:
        for cls in self._monitor_classes:
            try:
                self.monitors.append(cls(self))
            except Exception as exc:
                self.internal_error(f"{cls.__name__}.__init__", exc)
        self._dispatch.clear()

    def _install_probes(self) -> None:
        for cls in self._probe_classes:
            try:
                probe = cls()
                if not probe.applies(self):
                    continue
                probe.install(self)
                self.probes.append(probe)
            except Exception as exc:
                self.internal_error(f"install {cls.__name__}", exc)
                try:
                    probe.uninstall()
                except Exception:  # pragma: no cover
                    pass

    # ---------------------------------------------------------------- events
    def _handlers(self, hook: str) -> list[tuple[Monitor, Callable[..., Any]]]:
        handlers = []
        base = getattr(Monitor, hook, None)
        for monitor in self.monitors:
            impl = getattr(type(monitor), hook, None)
            if impl is None or impl is base:
                continue  # not overridden: skip the call entirely (hot path)
            handlers.append((monitor, getattr(monitor, hook)))
        self._dispatch[hook] = handlers
        return handlers

    def listens(self, hook: str) -> bool:
        """Whether an active monitor overrides ``hook`` (a probe skips patches nobody reads)."""
        handlers = self._dispatch.get(hook)
        return bool(self._handlers(hook) if handlers is None else handlers)

    def emit(self, hook: str, *args: Any, **kwargs: Any) -> None:
        """Call ``hook`` on every monitor that overrides it; an exception disables that monitor."""
        handlers = self._dispatch.get(hook)
        if handlers is None:
            handlers = self._handlers(hook)
        for monitor, fn in handlers:
            try:
                fn(*args, **kwargs)
            except Exception as exc:
                self._disable(monitor, hook, exc)

    def _disable(self, monitor: Monitor, hook: str, exc: BaseException) -> None:
        code = getattr(getattr(monitor, "rule", None), "code", "?")
        self.internal_error(f"monitor {code} {type(monitor).__name__}.{hook}; monitor disabled", exc)
        if monitor in self.monitors:
            self.monitors.remove(monitor)
        self._dispatch.clear()

    def internal_error(self, where: str, exc: BaseException) -> None:
        """Record an internal error (fail-open): the run continues, the report says what broke."""
        frame = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
        at = f" at {os.path.basename(frame[0].filename)}:{frame[0].lineno}" if frame else ""
        note = f"internal error in {where}: {type(exc).__name__}: {exc}{at}"
        if note not in self.notes:
            self.notes.append(note)

    # ---------------------------------------------------------------- probes call these
    def add_batch_observer(self, fn: Callable[[LoaderInfo, Any], None]) -> None:
        """Let a probe see each fetched batch (e.g. to recognise it when copied to CUDA)."""
        # Copy on write: a probe may remove itself while the list is being iterated.
        self._batch_observers = self._batch_observers + [fn]

    def add_step_listener(self, fn: Callable[[StepRecord], None]) -> None:
        self._step_listeners = self._step_listeners + [fn]

    def remove_step_listener(self, fn: Callable[[StepRecord], None]) -> None:
        """Stop calling ``fn`` at step ends (a probe that has seen enough: hot path)."""
        self._step_listeners = [f for f in self._step_listeners if f != fn]

    def add_progress_listener(self, fn: Callable[[int], None]) -> None:
        """Call ``fn(steps)`` as training progresses: at each optimizer step's end (``steps``: its
        index) and, in a loop that updates its parameters itself (no ``torch.optim`` optimizer
        stepped in its first :data:`~traindoctor.runtime.steps.NO_OPTIMIZER_BACKWARDS`
        ``backward()`` calls), at each ``backward()`` (``steps``: the backward calls so far). The
        probes that watch only the first steps (global module hooks, layer windows) stop by it in
        both kinds of loop."""
        self._progress_listeners = self._progress_listeners + [fn]

    def remove_progress_listener(self, fn: Callable[[int], None]) -> None:
        """Stop calling ``fn`` (hot path)."""
        self._progress_listeners = [f for f in self._progress_listeners if f != fn]

    def _progress(self, steps: int) -> None:
        for listener in self._progress_listeners:
            try:
                listener(steps)
            except Exception as exc:  # fail-open
                self.internal_error("progress listener", exc)

    def add_mode_listener(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` when a root model is called in a (train mode, grad mode) it was not
        called in last time (the module probe opens a window of layer patches)."""
        self._mode_listeners = self._mode_listeners + [fn]

    def root_mode_changed(self) -> None:
        for fn in self._mode_listeners:
            try:
                fn()
            except Exception as exc:  # fail-open
                self.internal_error("mode listener", exc)

    def remove_batch_observer(self, fn: Callable[[LoaderInfo, Any], None]) -> None:
        """Stop showing batches to ``fn`` (hot path)."""
        self._batch_observers = [f for f in self._batch_observers if f != fn]

    def add_loader(self, info: LoaderInfo) -> None:
        self.loaders.append(info)
        self.emit("on_loader_created", info)

    def record_batch(self, info: LoaderInfo, batch: Any, wait_s: float, t_end: float) -> None:
        self._fed[info.id] = info
        samples = batch_samples(batch)
        self.timer.add_batch(wait_s, t_end, samples, batch_tokens(batch))
        for observer in self._batch_observers:
            observer(info, batch)
        if self._dispatch.get("on_batch_fetched") != []:  # no monitor listens: skip (hot path)
            self.emit("on_batch_fetched", info, wait_s)

    def record_transfer(
        self,
        nbytes: int,
        seconds: float,
        pinned: bool,
        device_type: str,
        loader_info: LoaderInfo | None = None,
        t_end: float | None = None,
    ) -> None:
        if device_type == "cuda":
            self.uses_cuda = True
        self.timer.add_transfer(seconds, time.perf_counter() if t_end is None else t_end)
        self.emit("on_transfer", nbytes, seconds, pinned, device_type, loader_info)

    def record_backward(self, seconds: float = 0.0) -> None:
        if self._fed:
            self._mark_training_loaders()
        self.timer.add_backward(seconds)
        if self._primary_opt is None:
            marks = len(self._backward_marks)
            if marks < MAX_BACKWARD_MARKS:
                self._mark_backward()
            if marks >= NO_OPTIMIZER_BACKWARDS and self._progress_listeners:
                self._progress(marks + 1)
        self.emit("on_backward")

    def _mark_backward(self) -> None:
        """While no ``torch.optim`` optimizer has stepped, remember where each ``backward()``
        ended (the timer's running totals): a loop that updates the parameters itself (as
        pytorch/examples' word_language_model) is then profiled step by ``backward()``."""
        t = self.timer
        if self._sampler is not None:
            self._count_sampler()
        self._backward_marks.append(
            (
                time.perf_counter(),
                t._data,
                t._transfer,
                t._batches,
                t._samples,
                t.forward_total if t.forward_seen else None,
                t.backward_total,
                t.self_total,
            )
        )

    def record_sync(self, seconds: float, phase: int) -> None:
        """The host waited ``seconds`` for the GPU in ``.item()``, ``.cpu()``, ... called in
        ``phase`` (CUDA runs)."""
        self.timer.add_sync(seconds, phase)

    def record_step_flops(self, step: int, by_precision: Mapping[str, int], samples: int) -> None:
        """The FLOPs of training step ``step`` (``samples`` in it), by precision (the FLOPs probe)."""
        self.step_flops = (step, dict(by_precision), samples)

    def record_model(self, module: nn.Module) -> None:
        if module not in self.models:
            self.models.add(module)
            self.emit("on_model_found", module)

    def record_optimizer_pre(
        self, optimizer: Optimizer, entered: float | None = None, outside_s: float | None = None
    ) -> None:
        """``optimizer.step()`` begins (its pre-hook, entered at ``entered``: from there to the
        step's timing is the doctor's own work; ``outside_s``: torch's step wrapper before the
        hooks, when measured)."""
        self.optimizer_calls += 1
        known = self._optimizer_ids.get(id(optimizer))
        if known is None or known() is not optimizer:  # first step of this optimizer
            ref = weakref.ref(optimizer)
            self._optimizer_ids[id(optimizer)] = ref
            self._optimizers.append(ref)
            if self._primary_opt is None or self._primary_opt() is None:
                self._primary_opt = weakref.ref(optimizer)
                self._backward_marks.clear()
            self._note_param_device(optimizer)
            self.emit("on_optimizer_found", optimizer)
        self.emit("on_before_optimizer_step", optimizer)
        if self._fed:
            self._mark_training_loaders()
        if not self._loop_code_looked:
            self._find_loop_code()
        self._phase_before_step = self.timer.phase
        self.timer.phase = PHASE_OPTIMIZER
        clock = self.device_timer
        if clock is not None and clock.timing:
            clock.mark(PHASE_OPTIMIZER)
        t = time.perf_counter()
        if entered is not None:
            self.timer.self_total += t - entered
        self.timer.optimizer_pre(t, outside_s)

    def record_optimizer_post(self, optimizer: Optimizer, entered: float | None = None) -> float:
        """``optimizer.step()`` returned (its post-hook, entered at ``entered``); the doctor's own
        work after the step's end counts in the next step. Returns the clock when it was done."""
        t = time.perf_counter()
        timer = self.timer
        if entered is not None:
            timer.self_total += t - entered
        if self._sampler is not None:
            self._count_sampler()
        primary = self._primary_opt() if self._primary_opt is not None else None
        closes = primary is optimizer
        if not closes:
            # A second optimizer that keeps stepping while the first one stopped (a new
            # training phase) becomes the primary one.
            key = id(optimizer)
            self._other_opt_steps[key] = self._other_opt_steps.get(key, 0) + 1
            if primary is None or self._other_opt_steps[key] >= 2:
                self._primary_opt = weakref.ref(optimizer)
                self._other_opt_steps.clear()
                closes = True
        else:
            self._other_opt_steps.clear()
        self.timer.phase = self._phase_before_step
        record = self.timer.optimizer_post(t, closes)
        gpu = self.gpu
        if gpu is not None and self.device_timer is not None:
            if record is not None:
                gpu.step_end(record.index, self._phase_before_step)
            elif self.device_timer.timing:
                self.device_timer.mark(self._phase_before_step)
        self.emit("on_after_optimizer_step", optimizer)
        if record is not None:
            self.step = record.index
            index = record.index
            if (
                self._sampler is None
                and not self._sampler_failed
                and index >= 3
                and (index <= 8 or index & (index - 1) == 0 or index % 50 == 0)
            ):
                self._maybe_sample_host_work(record)  # steps 3-8, 16, 32, 50, 64, 100, ...
            for listener in self._step_listeners:
                try:
                    listener(record)
                except Exception as exc:  # fail-open: one listener must not lose the step
                    self.internal_error("step listener", exc)
            if self._progress_listeners:
                self._progress(record.index)
            self.emit("on_step_end", record)
        done = time.perf_counter()
        timer.self_total += done - t
        return done

    def _count_sampler(self) -> None:
        """The host-work sampler's time holding the training thread's GIL since the last count
        is the doctor's own work (it samples only outside the timed calls: other host work)."""
        sampler = self._sampler
        if sampler is None:
            return
        busy = sampler.busy_s
        self.timer.self_total += busy - self._sampler_counted
        self._sampler_counted = busy

    def _mark_training_loaders(self) -> None:
        for info in self._fed.values():
            info.feeds_training = True
        self._fed.clear()

    def loader_done(self, info: LoaderInfo) -> None:
        """A loader's epoch ended (or its iterator was dropped, e.g. an eval loop that broke off):
        batches it delivered before are not what the next training call consumes."""
        self._fed.pop(info.id, None)

    @property
    def trained(self) -> bool:
        """Whether the run trained at all: an optimizer step or a ``backward()`` was seen."""
        return (
            bool(self.timer.records)
            or self.timer.backward_calls > 0
            or any(getattr(info, "feeds_training", False) for info in self.loaders)
        )

    def training_loaders(self) -> list[LoaderInfo]:
        """Loaders whose batches fed training (``backward()`` or an optimizer step followed
        them): the input pipeline the data rules judge. A loader only iterated for evaluation is
        left out. A run that never trained (a loading benchmark, inference) keeps every loader."""
        if not self.trained:
            return list(self.loaders)
        return [info for info in self.loaders if getattr(info, "feeds_training", True)]

    def note_optimizer_site(self, optimizer: Optimizer, site: Site | None) -> None:
        """Remember where the user constructed ``optimizer`` (the optimizer probe calls this)."""
        try:
            if site and site[0]:
                self._optimizer_sites[optimizer] = site
        except TypeError:  # pragma: no cover - an optimizer that refuses weak references
            pass

    def optimizer_site(self, optimizer: Optimizer) -> Site | None:
        """The user's ``(filename, row)`` site (with ``.column``) of ``optimizer``'s construction."""
        try:
            return self._optimizer_sites.get(optimizer)
        except TypeError:  # pragma: no cover
            return None

    def _find_loop_code(self) -> None:
        """The code object of the user's training loop: the user frame calling ``step()``."""
        self._loop_code_looked = True
        try:
            from traindoctor.runtime.live import first_user_frame

            frame = first_user_frame(sys._getframe(2))
            self._loop_code = frame.f_code if frame is not None else None
            del frame
        except Exception as exc:  # pragma: no cover - defensive
            self.internal_error("training loop frame", exc)

    def _maybe_sample_host_work(self, record: StepRecord) -> None:
        """Start the host-work sampler when the loop's own host work dominates a step."""
        recent = self.records[-3:]  # three steps in a row: one slow step (a load spike) is not enough
        others = [o for o in (r.other_s for r in recent) if o is not None]
        if len(recent) < 3 or len(others) < len(recent):
            return
        wall = sum(r.wall_s for r in recent)
        if wall < 0.006 or sum(others) < 0.3 * wall:
            return
        if not self.thresholds.get("profile.sample_host_work", True):
            return
        try:
            from traindoctor.runtime.host_sampler import HostWorkSampler

            self._sampler = HostWorkSampler(
                self.timer, threading.get_ident(), self._loop_code, interval_s=record.wall_s / 10
            )
            self._sampler.start()
        except Exception as exc:  # fail-open
            self.internal_error("host-work sampler", exc)
            self._sampler = None
            self._sampler_failed = True

    def _note_param_device(self, optimizer: Optimizer) -> None:
        try:
            api = self.cuda_api
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if api is not None and api.on_device(p):
                        self.note_cuda_device(api.device_of(p))
                    elif getattr(p, "is_cuda", False):
                        self.uses_cuda = True
                    return
        except Exception as exc:  # pragma: no cover - exotic optimizer
            self.internal_error("optimizer parameters", exc)

    # ---------------------------------------------------------------- end of run
    def _finish_loaders(self) -> None:
        for info in self.loaders:
            try:
                info.worker_cpu.read(info.batches)
                info.close_epoch(self.ended_at)
            except Exception as exc:  # pragma: no cover - defensive
                self.internal_error("loader statistics", exc)

    def _update_distributed(self) -> None:
        try:
            dist_mod = sys.modules.get("torch.distributed")
            if dist_mod is not None and dist_mod.is_available() and dist_mod.is_initialized():
                self.world_size = int(dist_mod.get_world_size())
                self.rank = int(dist_mod.get_rank())
        except Exception as exc:  # pragma: no cover
            self.internal_error("distributed info", exc)

    def gpu_findings_allowed(self) -> bool:
        """GPU-only findings need a CUDA device *and* a run that actually used it."""
        return self.device.is_cuda and self.uses_cuda

    def _collect_findings(self) -> None:
        found: list[Finding] = []
        gpu_ok = self.gpu_findings_allowed()
        for monitor in self.monitors:
            rule = getattr(monitor, "rule", None)
            if rule is not None and rule.gpu_only and not gpu_ok:
                continue
            found.extend(monitor.findings)
        unique: dict[tuple[Any, ...], Finding] = {}
        for f in found:
            key = (f.code, f.filename, f.location, f.message)
            unique.setdefault(key, f)
        self.findings = sort_findings(list(unique.values()))

    def _build_profile(self) -> None:
        try:
            memory = measure_memory()
            tail = self.timer
            records = self.records
            optimizer_seen = bool(records) or not self._backward_marks
            if not optimizer_seen:
                records = backward_records(self._backward_marks, self.started_at)
            self.profiled_records = records
            self.profile = build_profile(
                records,
                run_s=max(self.ended_at - self.started_at, 0.0),
                loose_batches=tail._batches,
                loose_samples=tail._samples,
                loose_wait_s=tail._data,
                memory=memory,
                thresholds=self.thresholds,
                partial=self.partial,
                host_work=self._sampler.summary() if self._sampler else None,
                host_work_samples=self._sampler.samples if self._sampler else 0,
                optimizer_seen=optimizer_seen,
                token_ids=has_embedding(list(self.models)),
            )
            if self.gpu is not None:
                self._build_gpu_profile()
            if self.step_flops is not None:
                step, by_precision, samples = self.step_flops
                gpu = self.gpu is not None and self.gpu.device is not None  # the script trained there
                self.profile.add_flops(step, by_precision, samples, self.device.name, gpu)
        except Exception as exc:  # pragma: no cover - defensive
            self.internal_error("profile", exc)
            self.profile = Profile(partial=self.partial)

    def _finish_gpu(self) -> None:
        """Read the device's events and memory once (monitors read ``gpu_profile`` at
        ``on_run_end``); the warm-up steps are the host profile's."""
        assert self.gpu is not None
        try:
            warm = self.thresholds.get("profile.warmup_steps")
            steps = len(self.records)
            warmup = default_warmup(steps) if warm is None else min(int(warm), steps)
            counted = () if self.step_flops is None else (self.step_flops[0],)  # ran slower
            self.gpu_profile, self._gpu_memory = self.gpu.finish(warmup, exclude=counted)
        except Exception as exc:  # fail-open: the host profile stays
            self.internal_error("GPU profile", exc)
        for note in self.gpu.notes:
            self.notes.append(f"GPU timing: {note}")

    def _build_gpu_profile(self) -> None:
        """Add the device profile and GPU memory to the profile."""
        self.profile.add_gpu(self.gpu_profile, self._gpu_memory, self.thresholds)

    def environment(self) -> dict[str, Any]:
        """Facts about the run for the report (no user data)."""
        return run_environment(self)

    def report_dict(self, timeline: bool = True) -> dict[str, Any]:
        """The JSON report of this process: findings, profile, timeline, environment, notes.

        ``timeline=False`` leaves the per-step timeline out: the text report does not print it,
        and building it walks every step record (milliseconds at the end of a long run).
        """
        report: dict[str, Any] = {
            "findings": [relative_filename(f.to_dict(), self.start_dir) for f in self.findings],
            "profile": self.profile.to_dict(),
        }
        if timeline:
            report["timeline"] = session_timeline(self)
        report.update(environment=self.environment(), notes=list(self.notes), partial=self.partial)
        return report
