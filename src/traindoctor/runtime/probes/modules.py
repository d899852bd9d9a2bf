"""Module probe: what BatchNorm, convolution, Dropout and Linear layers see at forward time.

Patched at the class level (``_BatchNorm.forward``, ``Conv2d.forward``, ...), not with hooks on
the user's module objects: class patches cost nothing for the other layers, never end up inside a
pickled or deep-copied model, and keep ``torch.jit.script`` working (the wrapper carries
``__wrapped__``). A global ``register_module_forward_hook`` would push every module of the model
onto PyTorch's slow call path.

Per forward the probe only updates a counter keyed by (input shape, device type, train mode, grad
mode) in :class:`ModuleStats`; monitors read those aggregates at the end of the run. Some forwards
are also emitted as ``on_module_forward`` events because their *order* relative to ``backward()``
matters (TD701/TD702): a train-mode forward with autograd off (of a BN/Dropout layer whose mode
matters), an eval-mode forward that records an autograd graph, and the first forward of a layer
after its (train mode, grad mode) changed. Healthy training emits only at mode switches. A monitor that wants the
user's line calls :func:`traindoctor.runtime.live.forward_call_site` inside the event.

The layer patches are in place only while a *window* is open: from the start of the watch, and
again whenever a module switches between train and eval mode (``Module.train``, which ``eval()``
calls) or a root model is called with its (train mode, grad mode) changed (the model-roots probe
tells the session). A window closes :data:`WINDOW_STEPS` optimizer steps after it opened (in a
loop that updates its parameters itself, ``backward()`` calls: the session's progress listeners);
an evaluation loop, which makes no optimizer step, is watched to its end. Steady training then runs
the layers' own ``forward`` (a patched call costs about 2 us, paid by every layer of a deep model
at every step), and what the rules judge (the modes of evaluation forwards, the typical batch of
training forwards) is still seen. Once ``torch.compile`` has compiled anything, the window stays
open: compiled code guards on the functions it traced, and a ``forward`` that changes would make
it recompile.

On a run that may use CUDA the convolution classes stay patched outside the windows: cuDNN's
algorithm choice (TD401, TD402) depends on the input shapes of every training step, and two
steps of them say nothing about a run's shapes. Their steady forwards take the counter's fast path
(one increment). A CPU run closes them with the rest (no cost there).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from traindoctor.runtime.live import fields_repr, session_state
from traindoctor.runtime.probes.base import Probe
from traindoctor.runtime.records import ForwardInfo, Shape

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session

#: Distinct signatures kept per layer; further new ones only bump ``overflow``.
MAX_SIGNATURES = 64
#: Optimizer steps a window of layer patches stays open (see the module docstring).
WINDOW_STEPS = 2

#: (input shape, device type, training, grad enabled)
Signature = tuple[Shape | None, str, bool, bool]


class LayerStats:
    """Forward counts of one layer, keyed by :data:`Signature`."""

    __slots__ = ("counts", "kind", "last_mode", "overflow", "ref", "sensitive", "type_name")

    kind: str
    type_name: str
    ref: Any
    #: :func:`mode_sensitive` at the first forward (kept: the module may be gone at run end).
    sensitive: bool
    counts: dict[Signature, int]
    overflow: int
    #: (training, grad enabled) of the previous forward.
    last_mode: tuple[bool, bool] | None

    def __init__(self, kind: str, type_name: str, ref: Any, sensitive: bool = False) -> None:
        self.kind = kind
        self.type_name = type_name
        self.ref = ref
        self.sensitive = sensitive
        self.counts = {}
        self.overflow = 0
        self.last_mode = None

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    def module(self) -> Any:
        return self.ref()

    def total(self, *, training: bool | None = None, grad: bool | None = None) -> int:
        return sum(
            n
            for (shape, dev, tr, gr), n in self.counts.items()
            if (training is None or tr == training) and (grad is None or gr == grad)
        )


class ModuleStats:
    """Per-session aggregate of layer forwards (see module docstring)."""

    def __init__(self) -> None:
        #: Layers by ``id()``; a layer whose id was reused by a new module moves to ``retired``.
        self.layers: dict[int, LayerStats] = {}
        self.retired: list[LayerStats] = []

    def record(
        self, module: Any, kind: str, shape: Shape | None, device_type: str, training: bool, grad: bool
    ) -> LayerStats:
        """Count one forward. Also the entry point tests use to replay recorded events."""
        key = id(module)
        rec = self.layers.get(key)
        if rec is None or rec.ref() is not module:
            if rec is not None:
                self.retired.append(rec)
            rec = LayerStats(kind, type(module).__name__, _ref(module), mode_sensitive(module, kind))
            self.layers[key] = rec
        sig = (shape, device_type, training, grad)
        counts = rec.counts
        n = counts.get(sig)
        if n is not None:
            counts[sig] = n + 1
        elif len(counts) < MAX_SIGNATURES:
            counts[sig] = 1
        else:
            rec.overflow += 1
        return rec

    def of_kind(self, *kinds: str) -> list[LayerStats]:
        """Layers of the given kinds seen during the run (alive or not), in first-seen order."""
        return [rec for rec in self.retired + list(self.layers.values()) if rec.kind in kinds]


def _ref(module: Any) -> Any:
    try:
        return weakref.ref(module)
    except TypeError:  # pragma: no cover - modules are always weak-referenceable
        return lambda: module


def module_stats(session: object) -> ModuleStats:
    """The session's :class:`ModuleStats` (shared by the probe and the monitors)."""
    return session_state(session, "module_stats", ModuleStats)


def mode_sensitive(module: Any, kind: str) -> bool:
    """Whether train vs eval mode changes what this layer computes or updates."""
    if kind in ("batchnorm", "syncbatchnorm"):
        return bool(getattr(module, "track_running_stats", False)) and getattr(module, "running_mean", None) is not None
    if kind == "dropout":
        return float(getattr(module, "p", 0.0) or 0.0) > 0.0
    return False


def _dynamo_compiled() -> bool:
    """Whether ``torch.compile`` has compiled any frame in this process (dynamo's counters,
    read without adding a key to them)."""
    import sys

    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return False
    try:
        frames = utils.counters.get("frames")
        return bool(frames and frames.get("total", 0))
    except Exception:  # pragma: no cover - a torch without these counters: keep the patches
        return True


def _as_original(wrapper: Callable[..., Any], original: Callable[..., Any]) -> Callable[..., Any]:
    """``wrapper`` rebuilt with ``original``'s globals, name and ``__wrapped__``.

    ``torch.jit.script`` compiles a module's ``forward`` from ``inspect.unwrap``'s source (the
    original's) but resolves free names through the function it found (the wrapper): with the
    original's globals, names such as ``F`` in ``_BatchNorm.forward`` still resolve. The wrapper
    itself only uses its closure, so its behaviour does not depend on the globals.
    """
    import types

    rebuilt = types.FunctionType(
        wrapper.__code__, original.__globals__, wrapper.__name__, wrapper.__defaults__, wrapper.__closure__
    )
    functools.update_wrapper(rebuilt, original)
    return rebuilt


def _patch_targets() -> list[tuple[Any, str]]:
    import torch.nn as nn
    from torch.nn.modules.batchnorm import _BatchNorm

    targets: list[tuple[Any, str]] = [
        (_BatchNorm, "batchnorm"),
        (nn.SyncBatchNorm, "syncbatchnorm"),
        (nn.Linear, "linear"),
    ]
    for name in ("Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"):
        targets.append((getattr(nn, name), "conv"))
    for name in ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"):
        cls = getattr(nn, name, None)
        if cls is not None:
            targets.append((cls, "dropout"))
    # Only classes that define forward themselves (subclasses inherit the patched one).
    return [(cls, kind) for cls, kind in targets if "forward" in vars(cls)]


class ModuleProbe(Probe):
    """Counts layer forwards by shape and mode; emits train/eval-mode anomalies."""

    name = "modules"
    order = 60

    def install(self, session: Session) -> None:
        super().install(session)
        import torch

        self.stats = module_stats(session)
        self._torch = torch
        self._is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)
        self._is_grad_enabled = torch.is_grad_enabled
        self._tensor = torch.Tensor
        self._targets = _patch_targets()
        #: Whether the layer classes are patched (a window is open).
        self._window_open = False
        #: The classes patched now; on a run that may use CUDA the conv classes stay patched
        #: between windows (see the module docstring).
        self._patched: set[Any] = set()
        self._keep_conv = session.cuda_api is not None
        self._on_device = session.cuda_api.on_device if session.cuda_api is not None else None
        self._window_steps = 0
        self.patch(torch.nn.Module, "train", self._wrap_train)
        session.add_mode_listener(self.open_window)
        self.open_window()

    # ---------------------------------------------------------------- windows
    def open_window(self) -> None:
        """Patch the layer classes (if not already) and watch for ``WINDOW_STEPS`` steps more."""
        self._window_steps = 0
        if self._window_open or self.session is None:
            return
        for cls, kind in self._targets:
            if cls not in self._patched:
                self.patch(cls, "forward", functools.partial(self._wrap, kind=kind))
                self._patched.add(cls)
        self._window_open = True
        self.session.add_progress_listener(self._on_step)

    def close_window(self) -> None:
        """Give the layer classes their own ``forward`` back (exactly, as ``uninstall`` does)."""
        if self.session is not None:
            self.session.remove_progress_listener(self._on_step)
        if self._window_open:
            for cls, kind in reversed(self._targets):
                if kind == "conv" and self._keep_conv:
                    continue  # uninstall restores them with every other patch
                self.unpatch(cls, "forward")
                self._patched.discard(cls)
            self._window_open = False

    def _on_step(self, steps: int) -> None:
        self._window_steps += 1
        if self._window_steps < WINDOW_STEPS:
            return
        if _dynamo_compiled():
            # torch.compile guards on the functions it traced: a ``forward`` that changes at
            # every window would recompile the model (and past the recompile limit, run it
            # eagerly). Once anything is compiled the patches stay, as they always did.
            if self.session is not None:
                self.session.remove_progress_listener(self._on_step)
            return
        self.close_window()

    def uninstall(self) -> None:
        self.close_window()
        super().uninstall()
        self._patched.clear()

    def _wrap_train(self, original: Callable[..., Any]) -> Callable[..., Any]:
        probe = self

        @functools.wraps(original)
        def train(module: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                mode = args[0] if args else kwargs.get("mode", True)
                if not probe._window_open and module.training != bool(mode):
                    probe.open_window()  # a switch between train and eval mode
            except Exception as exc:  # fail-open
                probe.fail("Module.train", exc)
            return original(module, *args, **kwargs)

        return train

    def _wrap(self, original: Callable[..., Any], *, kind: str) -> Callable[..., Any]:
        probe = self
        compiling = self._is_compiling
        grad_enabled = self._is_grad_enabled
        tensor = self._tensor
        layers = self.stats.layers
        on_device = self._on_device

        def forward(module: Any, *args: Any, **kwargs: Any) -> Any:
            if not compiling():
                try:
                    x = args[0] if args else kwargs.get("input")
                    # Fast path (every forward of ordinary training or evaluation): the layer is
                    # known, its (train mode, grad mode) did not change and they agree, and the
                    # input signature was seen before: one counter increment, no event.
                    rec = layers.get(id(module))
                    training = module.training
                    if (
                        rec is not None
                        and type(x) is tensor
                        and training is grad_enabled()
                        and rec.last_mode == (training, training)
                        and rec.ref() is module
                        and (x.is_cpu or on_device is not None)
                    ):
                        # the key LayerStats.record builds: (shape, device, train mode, grad mode)
                        dev = "cuda" if on_device is not None and on_device(x) else "cpu" if x.is_cpu else x.device.type
                        sig = (tuple(x.shape), dev, training, training)
                        counts = rec.counts
                        n = counts.get(sig)
                        if n is not None:
                            counts[sig] = n + 1
                        else:
                            probe._seen(module, kind, x)
                    else:
                        probe._seen(module, kind, x)
                except Exception as exc:  # fail-open
                    probe.fail("forward", exc)
            return original(module, *args, **kwargs)

        return _as_original(forward, original)

    def _seen(self, module: Any, kind: str, x: Any) -> None:
        if isinstance(x, self._tensor):
            shape: Shape | None = tuple(x.shape)
            # ``x.device`` builds a torch.device each call: ask the cheap flags first.
            on_device = self._on_device
            device_type = (
                "cuda"
                if on_device is not None and on_device(x)
                else "cpu"
                if x.is_cpu
                else "cuda"
                if x.is_cuda
                else x.device.type
            )
            x_requires_grad = x.requires_grad
        else:
            shape, device_type, x_requires_grad = None, "", False
        training = module.training
        grad = self._is_grad_enabled()
        rec = self.stats.record(module, kind, shape, device_type, training, grad)
        mode = (training, grad)
        changed = rec.last_mode != mode
        rec.last_mode = mode
        if training == grad:
            if not changed:
                return  # ordinary training (train + grad) or evaluation (eval + no_grad)
            builds_graph, sensitive = False, mode_sensitive(module, kind)
        else:
            builds_graph = grad and (
                x_requires_grad or any(p is not None and p.requires_grad for p in module._parameters.values())
            )
            sensitive = mode_sensitive(module, kind)
            if not changed:
                if training and not sensitive:
                    return  # train mode under no_grad only matters for BN statistics and Dropout
                if not training and not builds_graph:
                    return  # eval mode, autograd on, nothing requires grad: no graph is built
        info = ForwardInfo(
            kind=kind,
            shape=shape,
            device_type=device_type,
            training=training,
            grad_enabled=grad,
            builds_graph=builds_graph,
            mode_sensitive=sensitive,
        )
        self.watched.emit("on_module_forward", module, info)
