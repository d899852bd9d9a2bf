"""What ``verify-resume`` records inside the user's script: one small, self-contained recorder.

Per optimizer step (counted by the first optimizer that steps) it keeps the values of the tensors
``backward()`` was called on (exact, as ``float.hex``), the learning rates, the GradScaler scales,
a digest of the first top-level forward's inputs and of every RNG's state at that moment, and the
epoch passed to samplers' ``set_epoch``. At the "detail" step (the first step after the resume
point) it also digests the model state and the optimizer state (per buffer kind, with a flag for
"absent or all zero"), which is how a lost optimizer state is told apart from other causes.

It never changes a value the script computes: hooks only read. Stopping is a hard ``os._exit``
(as a preemption would be) after the record and, at the last step, the final state are written.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import random
import sys
import weakref
from collections.abc import Callable
from typing import Any

INTERRUPT_EXIT = 75  # the interrupted run's exit status (EX_TEMPFAIL)


def local(tensor: Any) -> Any:
    """This rank's shard of a DTensor (reading a whole DTensor would need a collective)."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _bytes_of(tensor: Any) -> bytes:
    import torch

    t = local(tensor).detach().cpu().contiguous().reshape(-1)
    if t.dtype == torch.bool:
        t = t.to(torch.uint8)
    try:
        data: bytes = t.view(torch.uint8).numpy().tobytes()
        return data
    except (RuntimeError, TypeError):
        return repr(t.tolist()).encode()


def digest_tensors(values: Any) -> str:
    """A digest of every tensor in a nested structure (shapes and dtypes included)."""
    import torch

    h = hashlib.blake2b(digest_size=12)
    stack = [values]
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            h.update(f"{tuple(value.shape)}{value.dtype}".encode())
            h.update(_bytes_of(value))
        elif isinstance(value, dict):
            stack.extend(value[k] for k in sorted(value, key=str))
        elif isinstance(value, (list, tuple)):
            stack.extend(reversed(value))
        elif isinstance(value, (int, float, str, bool)) or value is None:
            h.update(repr(value).encode())
    return h.hexdigest()


def rng_digests() -> dict[str, str]:
    """Digests of each generator's state right now (torch CPU, CUDA, NumPy, random)."""
    import torch

    out = {
        "torch": hashlib.blake2b(_bytes_of(torch.get_rng_state()), digest_size=12).hexdigest(),
        "python": hashlib.blake2b(repr(random.getstate()).encode(), digest_size=12).hexdigest(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        out["cuda"] = digest_tensors(list(torch.cuda.get_rng_state_all()))
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        _, keys, pos, *_ = numpy.random.get_state()
        out["numpy"] = hashlib.blake2b(keys.tobytes() + str(pos).encode(), digest_size=12).hexdigest()
    return out


def optimizer_summary(optimizer: Any) -> dict[str, Any]:
    """Per state kind (``momentum_buffer``, ``exp_avg`` ...): count, digest, all-zero flag."""
    import torch

    kinds: dict[str, list[Any]] = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                kinds.setdefault(str(key), []).append(value)
    summary: dict[str, Any] = {"params_with_state": len(optimizer.state), "kinds": {}}
    for key in sorted(kinds):
        values = kinds[key]
        tensors = [v for v in values if isinstance(v, torch.Tensor)]
        zero = bool(tensors) and all(not bool(local(t).detach().ne(0).any()) for t in tensors)
        summary["kinds"][key] = {"count": len(values), "digest": digest_tensors(values), "all_zero": zero}
    return summary


class Recorder:
    """Hooks installed in the child process before the user's script runs."""

    def __init__(
        self,
        *,
        mode: str,
        target: int,
        offset: int,
        interrupt_at: int | None,
        detail_step: int | None,
        out_dir: str,
        shared_dir: str | None = None,
    ) -> None:
        self.mode = mode
        self.target = target
        self.offset = offset
        self.interrupt_at = interrupt_at
        self.detail_step = detail_step
        self.out_dir = out_dir
        #: Under torchrun: where the rank that saw the checkpoint tells the others (a rank-0-only
        #: ``torch.save`` must stop every rank at the same step).
        self.shared_dir = shared_dir
        self.local_steps = 0
        self.losses: dict[int, list[str]] = {}
        self.steps: dict[int, dict[str, Any]] = {}
        self.saves: list[dict[str, Any]] = []
        self.loader_lengths: list[int] = []
        self.notes: list[str] = []
        self.optimizers: list[Any] = []
        self.roots: list[Any] = []
        self._root_ids: set[int] = set()
        self.scalers: weakref.WeakSet[Any] = weakref.WeakSet()
        self.depth = 0
        self.pending_exit = False
        self.checkpoint_step: int | None = None
        #: > 0 while torch.distributed.checkpoint takes its zero-learning-rate optimizer step
        #: that creates optimizer state to load into: not a training step.
        self.paused = 0
        self.finished = False
        self.written = False

    # -- bookkeeping ------------------------------------------------------------------------
    @property
    def step(self) -> int:
        """The global index of the step in progress (1-based)."""
        return self.offset + self.local_steps + 1

    def _entry(self) -> dict[str, Any]:
        return self.steps.setdefault(self.step, {})

    def write_record(self, status: str) -> None:
        if self.written:
            return
        self.written = True
        record = {
            "mode": self.mode,
            "status": status,
            "offset": self.offset,
            "steps_done": self.local_steps,
            "last_step": self.offset + self.local_steps,
            "losses": {str(k): v for k, v in sorted(self.losses.items())},
            "steps": {str(k): v for k, v in sorted(self.steps.items())},
            "saves": self.saves,
            "checkpoint_step": self.checkpoint_step,
            "loader_lengths": sorted(set(self.loader_lengths)),
            "notes": self.notes,
            "cuda_used": _cuda_used(),
        }
        path = os.path.join(self.out_dir, "record.json")
        with open(path + ".tmp", "w") as fh:
            json.dump(record, fh, sort_keys=True)
        os.replace(path + ".tmp", path)

    def dump_final_state(self, save: Callable[..., Any]) -> None:
        state = {
            "models": {
                f"{i}:{type(m).__name__}": m.state_dict() for i, m in enumerate(self.roots) if len(m.state_dict()) > 0
            },
            "optimizers": [opt.state_dict() for opt in self.optimizers],
        }
        save(_locals(state), os.path.join(self.out_dir, "final.pt"))

    def hard_exit(self, status: str, code: int) -> None:
        self.write_record(status)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    # -- hooks ------------------------------------------------------------------------------
    def on_backward(self, tensors: Any) -> None:
        import torch

        items = tensors if isinstance(tensors, (list, tuple)) else [tensors]
        for t in items:
            if isinstance(t, torch.Tensor) and t.numel() == 1:
                value = float(t.detach().reshape(()).to(torch.float64).cpu())
                self.losses.setdefault(self.step, []).append(value.hex())

    def on_forward_pre(self, module: Any, args: Any) -> None:
        self.depth += 1
        if self.depth != 1:
            return
        if id(module) not in self._root_ids:
            self._root_ids.add(id(module))
            self.roots.append(module)
        entry = self._entry()
        if "inputs" in entry:
            return
        entry["inputs"] = digest_tensors(args)
        entry["rng"] = rng_digests()
        if self.step == self.detail_step:
            entry["model"] = {
                f"{self.roots.index(module)}:{type(module).__name__}": {
                    name: digest_tensors(value) for name, value in module.state_dict().items()
                }
            }

    def on_forward_post(self, module: Any, args: Any, output: Any) -> None:
        self.depth = max(0, self.depth - 1)

    def on_step_pre(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.paused:
            return
        if not self.pending_exit and self.shared_dir and self.mode == "interrupt":
            self._checkpoint_seen_elsewhere()
        if self.pending_exit:
            self.hard_exit("interrupted", INTERRUPT_EXIT)
        if not self.optimizers or all(o is not optimizer for o in self.optimizers):
            self.optimizers.append(optimizer)
        entry = self._entry()
        index = next(i for i, o in enumerate(self.optimizers) if o is optimizer)
        entry.setdefault("lr", {})[str(index)] = [
            float(g["lr"]) if not hasattr(g["lr"], "item") else float(g["lr"].item()) for g in optimizer.param_groups
        ]
        scales = []
        for scaler in list(self.scalers):
            try:
                if scaler.is_enabled() and getattr(scaler, "_scale", None) is not None:
                    scales.append(float(scaler.get_scale()))
            except Exception:
                pass
        if scales:
            entry["scale"] = sorted(scales)
        if self.step == self.detail_step:
            entry.setdefault("optimizer", {})[str(index)] = optimizer_summary(optimizer)

    def on_step_post(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if self.paused or not self.optimizers or optimizer is not self.optimizers[0]:
            return
        self.local_steps += 1
        if self.offset + self.local_steps >= self.target:
            import torch

            self.finished = True
            self.dump_final_state(_ORIGINAL_SAVE or torch.save)
            self.hard_exit("finished", 0)

    def on_save(self, obj: Any, f: Any) -> None:
        done = self.offset + self.local_steps
        self.saves.append({"step": done, "path": str(f) if isinstance(f, (str, os.PathLike)) else type(f).__name__})
        if (
            self.mode == "interrupt"
            and self.checkpoint_step is None
            and self.interrupt_at is not None
            and done >= self.interrupt_at
        ):
            self.checkpoint_step = done
            self.pending_exit = True
            if self.shared_dir:
                path = os.path.join(self.shared_dir, "checkpoint_step")
                with open(path + f".tmp{os.getpid()}", "w") as fh:
                    fh.write(str(done))
                os.replace(path + f".tmp{os.getpid()}", path)

    def _checkpoint_seen_elsewhere(self) -> None:
        try:
            with open(os.path.join(self.shared_dir or "", "checkpoint_step")) as fh:
                step = int(fh.read().strip())
        except (OSError, ValueError):
            return
        if step <= self.offset + self.local_steps:
            self.checkpoint_step = step
            self.pending_exit = True

    def on_set_epoch(self, epoch: int) -> None:
        self._entry()["epoch"] = int(epoch)

    def on_loader_iter(self, loader: Any) -> None:
        try:
            self.loader_lengths.append(len(loader))
        except TypeError:
            pass


def _pause_during_dcp_state_init(recorder: Recorder) -> None:
    """DCP's ``get_state_dict`` steps a state-less optimizer once (lr 0) to create its state."""
    try:
        import torch.distributed.checkpoint.state_dict as dsd
    except Exception:
        return
    original = getattr(dsd, "_init_optim_state", None)
    if original is None:
        return

    def init_optim_state(*args: Any, **kwargs: Any) -> Any:
        recorder.paused += 1
        try:
            return original(*args, **kwargs)
        finally:
            recorder.paused -= 1

    dsd._init_optim_state = init_optim_state


def _locals(value: Any) -> Any:
    """A state with every DTensor replaced by this rank's shard (loads with weights_only)."""
    if isinstance(value, dict):
        return {k: _locals(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_locals(v) for v in value)
    return local(value)


def _cuda_used() -> bool:
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized())


_ORIGINAL_SAVE: Callable[..., Any] | None = None


def install(recorder: Recorder) -> None:
    """Wire the recorder into torch: global hooks where torch has them, thin wrappers elsewhere."""
    global _ORIGINAL_SAVE
    import torch
    import torch.autograd
    from torch.nn.modules.module import (
        register_module_forward_hook,
        register_module_forward_pre_hook,
    )
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    original_backward = torch.autograd.backward

    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        recorder.on_backward(tensors)
        return original_backward(tensors, *args, **kwargs)

    torch.autograd.backward = backward  # Tensor.backward looks it up at call time
    register_module_forward_pre_hook(recorder.on_forward_pre)
    register_module_forward_hook(recorder.on_forward_post, always_call=True)
    register_optimizer_step_pre_hook(recorder.on_step_pre)
    register_optimizer_step_post_hook(recorder.on_step_post)

    _ORIGINAL_SAVE = torch.save

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        result = _ORIGINAL_SAVE(obj, f, *args, **kwargs)
        recorder.on_save(obj, f)
        return result

    torch.save = save

    scaler_init = torch.amp.GradScaler.__init__

    def init_scaler(self: Any, *args: Any, **kwargs: Any) -> None:
        scaler_init(self, *args, **kwargs)
        recorder.scalers.add(self)

    torch.amp.GradScaler.__init__ = init_scaler  # type: ignore[method-assign]  # a recording wrapper in torch's place

    def wrap_set_epoch(cls: Any) -> None:
        original = cls.set_epoch

        def set_epoch(self: Any, epoch: int, *args: Any, **kwargs: Any) -> Any:
            recorder.on_set_epoch(epoch)
            return original(self, epoch, *args, **kwargs)

        cls.set_epoch = set_epoch

    wrap_set_epoch(torch.utils.data.DistributedSampler)
    from traindoctor.checkpoint.data import ResumableSampler

    wrap_set_epoch(ResumableSampler)

    loader_iter = torch.utils.data.DataLoader.__iter__

    def iterate(self: Any) -> Any:
        recorder.on_loader_iter(self)
        return loader_iter(self)

    torch.utils.data.DataLoader.__iter__ = iterate  # type: ignore[method-assign]  # a recording wrapper in torch's place
    _pause_during_dcp_state_init(recorder)
    atexit.register(lambda: recorder.write_record("finished" if recorder.finished else "ended"))
