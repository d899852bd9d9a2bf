"""The typed hooks runtime rules subscribe to: probes emit, monitors judge.

Probes (``traindoctor.runtime.probes``) are thin adapters on torch that record what happens and
call these hooks on every active :class:`Monitor`. A monitor is the runtime half of a rule: it
overrides the few hooks it needs (all are no-ops here, as Lightning's ``Callback``) and reports
findings with measured evidence, usually at :meth:`Monitor.on_run_end`.

Hooks run on the training hot path: keep them cheap (record numbers, decide at the end).
This module must not import torch (its types are imported for type checkers only).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from traindoctor.finding import Finding, Location, Origin, Severity

if TYPE_CHECKING:  # pragma: no cover
    import torch
    from torch import nn
    from torch.amp import GradScaler
    from torch.optim import Optimizer
    from torch.optim.lr_scheduler import LRScheduler
    from torch.utils.data import DistributedSampler

    from traindoctor.runtime.device import DeviceInfo
    from traindoctor.runtime.gpu_profile import GpuProfile
    from traindoctor.runtime.live import Site
    from traindoctor.runtime.records import ForwardInfo, LoaderInfo
    from traindoctor.runtime.step_timer import StepRecord


class RuleInfo(Protocol):
    """What a monitor and its session read of the rule class the monitor reports for: the
    finding's metadata (:class:`traindoctor.rules.base.Rule` subclasses provide it)."""

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[Severity]
    #: Reported only when the run used a CUDA device.
    gpu_only: ClassVar[bool]


class SessionView(Protocol):
    """What monitors (and the runtime facts they call) read of the session watching the run:
    :class:`~traindoctor.runtime.session.Session` provides it. A protocol, not the class: the
    session module imports this one. Everything here is read-only for a monitor."""

    @property
    def thresholds(self) -> Mapping[str, Any]:
        """The configured thresholds (user configuration: any values), by key."""
        ...

    @property
    def step(self) -> int:
        """Completed optimizer steps."""
        ...

    @property
    def optimizer_calls(self) -> int:
        """``optimizer.step()`` calls so far (all optimizers)."""
        ...

    @property
    def backward_calls_this_step(self) -> int:
        """``backward()`` calls since the last step ended."""
        ...

    @property
    def device(self) -> DeviceInfo:
        """The accelerator the run may target."""
        ...

    @property
    def uses_cuda(self) -> bool:
        """Whether the run actually used CUDA."""
        ...

    @property
    def cpu_count(self) -> int:
        """Cores this process may use."""
        ...

    @property
    def machine_cores(self) -> int:
        """Cores of the machine."""
        ...

    @property
    def world_size(self) -> int:
        """Processes in the run (``WORLD_SIZE``, or the process group's size at the end)."""
        ...

    @property
    def rank(self) -> int:
        """This process's rank in the run."""
        ...

    @property
    def local_rank(self) -> int:
        """This process's rank on its machine."""
        ...

    @property
    def local_world_size(self) -> int:
        """Processes of the run on this machine."""
        ...

    @property
    def started_at(self) -> float:
        """``perf_counter()`` when the watch started."""
        ...

    @property
    def ended_at(self) -> float:
        """``perf_counter()`` when the watch ended (0.0 before)."""
        ...

    @property
    def notes(self) -> Sequence[str]:
        """Internal notes of the run (fail-open errors, ignored nested watches)."""
        ...

    @property
    def loaders(self) -> Sequence[LoaderInfo]:
        """Every DataLoader seen, in order."""
        ...

    @property
    def models(self) -> Set[nn.Module]:
        """Root modules seen running forward (still alive)."""
        ...

    @property
    def optimizers(self) -> Sequence[Optimizer]:
        """Optimizers seen stepping (still alive), in order of first step."""
        ...

    @property
    def records(self) -> Sequence[StepRecord]:
        """Finished steps."""
        ...

    @property
    def gpu_profile(self) -> GpuProfile | None:
        """The device-time profile of a CUDA run, read once before ``on_run_end`` (None on a
        CPU run, or when no step was timed on the device)."""
        ...

    def training_loaders(self) -> list[LoaderInfo]:
        """Loaders whose batches fed training (every loader when the run never trained)."""
        ...

    def optimizer_site(self, optimizer: Optimizer) -> Site | None:
        """Where the user constructed ``optimizer``, if known."""
        ...


class Monitor:
    """Base class of the runtime half of a rule. Subclass it in the rule's own module."""

    #: The rule class (metadata and docs) this monitor reports for.
    rule: ClassVar[type[RuleInfo]]

    def __init__(self, session: SessionView) -> None:
        """``session``: the :class:`~traindoctor.runtime.session.Session` watching the run."""
        self.session = session
        self.findings: list[Finding] = []

    # ---------------------------------------------------------------- helpers
    def threshold(self, key: str, default: Any) -> Any:
        """A configurable threshold: ``thresholds = {"TD102.min_wait_share": 0.3}`` or by key."""
        cfg = getattr(self.session, "thresholds", {}) or {}
        return cfg.get(f"{self.rule.code}.{key}", cfg.get(key, default))

    def report(
        self,
        message: str,
        *,
        evidence: Mapping[str, Any] | None = None,
        step: int | None = None,
        filename: str = "",
        row: int | None = None,
        column: int | None = None,
        help: str | None = None,
    ) -> Finding:
        """Record a finding of this monitor's rule (the session collects it at the end) and return it."""
        finding = Finding(
            code=self.rule.code,
            name=self.rule.name,
            severity=self.rule.severity,
            message=message,
            filename=filename,
            location=Location(row, column or 1) if row else None,
            origin=Origin.RUNTIME,
            help=help,
            evidence=dict(evidence or {}),
            step=step,
        )
        self.findings.append(finding)
        return finding

    # ---------------------------------------------------------------- run
    def on_run_start(self) -> None:
        """Called when the watch starts, before any user code runs."""

    def on_run_end(self) -> None:
        """Called once when the watch ends (normally, on exception or on Ctrl-C)."""

    # ---------------------------------------------------------------- data loading
    def on_loader_created(self, loader_info: LoaderInfo) -> None:
        """Called when a DataLoader is constructed (or first iterated, if built before the watch)."""

    def on_loader_iter_start(self, loader_info: LoaderInfo) -> None:
        """Called when an epoch of a DataLoader begins (``iter(loader)``); workers may be spawned."""

    def on_batch_fetched(self, loader_info: LoaderInfo, wait_s: float) -> None:
        """Called when the training loop received a batch after waiting ``wait_s`` seconds for it."""

    def on_loader_iter_end(self, loader_info: LoaderInfo) -> None:
        """Called when a DataLoader iterator is exhausted (the epoch ran to its end)."""

    def on_transfer(
        self,
        nbytes: int,
        seconds: float,
        pinned: bool,
        device_type: str,
        loader_info: LoaderInfo | None = None,
    ) -> None:
        """Called when a host tensor was copied to an accelerator (``loader_info``: its loader, if known)."""

    # ---------------------------------------------------------------- model and optimizer
    def on_model_found(self, module: nn.Module) -> None:
        """Called when a root ``nn.Module`` is first seen running forward (during warm-up)."""

    def on_optimizer_found(self, optimizer: Optimizer) -> None:
        """Called when an optimizer steps for the first time, before that step."""

    def on_backward(self) -> None:
        """Called after each ``backward()`` call (counts gradient-accumulation micro-batches)."""

    def on_loss_backward(self, loss: torch.Tensor) -> None:
        """Called before ``loss.backward()`` runs (``Tensor.backward``; the gradients are not yet added)."""

    def on_loss_input(self, kind: str, logits: torch.Tensor) -> None:
        """Called when a logits loss (``kind``: ``"bce_with_logits"`` or ``"cross_entropy"``) gets its input."""

    def on_before_optimizer_step(self, optimizer: Optimizer) -> None:
        """Called before ``optimizer.step()`` runs (the gradients are final here)."""

    def on_after_optimizer_step(self, optimizer: Optimizer) -> None:
        """Called after ``optimizer.step()`` returned."""

    def on_step_end(self, step_record: StepRecord) -> None:
        """Called when a training step ended (after the primary optimizer's step), with its timings."""

    # ---------------------------------------------------------------- mixed precision (R2 probes)
    def on_autocast_enter(self, device_type: str, dtype: torch.dtype) -> None:
        """Called when an enabled autocast region is entered."""

    def on_scaler_created(self, scaler: GradScaler, site: Site | None = None) -> None:
        """Called when a GradScaler is constructed (``site``: the user's ``(filename, row)``)."""

    def on_scaler_call(self, scaler: GradScaler, method: str, optimizer: Optimizer | None = None) -> None:
        """Called before ``scaler.scale/unscale_/step/update`` runs (``method`` names which)."""

    def on_clip_grad(
        self, kind: str, parameters: torch.Tensor | Iterable[torch.Tensor], site: Site | None = None
    ) -> None:
        """Called before ``clip_grad_norm_`` (``kind="norm"``) or ``clip_grad_value_`` (``"value"``)."""

    def on_scheduler_created(self, scheduler: LRScheduler, site: Site | None = None) -> None:
        """Called when an LR scheduler is constructed."""

    # ---------------------------------------------------------------- checkpoints (R2 probes)
    def on_checkpoint_save(self, obj: object, path: str | None, site: Site | None = None) -> None:
        """Called after ``torch.save(obj, path)`` wrote its file (``path`` None for unnamed buffers)."""

    # ---------------------------------------------------------------- modules (R2 probes)
    def on_module_forward(self, module: nn.Module, info: ForwardInfo) -> None:
        """Called on a notable forward of a BatchNorm/conv/Dropout/Linear layer (see :class:`ForwardInfo`)."""

    # ---------------------------------------------------------------- distributed / backends (R2)
    def on_sampler_created(self, sampler: DistributedSampler[Any], site: Site | None = None) -> None:
        """Called when a ``DistributedSampler`` is constructed."""

    def on_sampler_iter(self, sampler: DistributedSampler[Any]) -> None:
        """Called when a ``DistributedSampler`` is iterated (an epoch of its loader begins)."""

    def on_sampler_set_epoch(self, sampler: DistributedSampler[Any], epoch: int) -> None:
        """Called when ``DistributedSampler.set_epoch(epoch)`` is called."""

    def on_backend_flags(self, flags: Mapping[str, bool], site: Site | None = None) -> None:
        """Called when cudnn ``benchmark``/``deterministic`` change (and once at start, site None)."""
