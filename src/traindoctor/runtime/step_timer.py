"""The timings of each training step, as the probes' wrappers measure them (no torch import).

:class:`StepTimer` accumulates the current step's timings from the probes' wrappers (a few
additions per call) and closes a :class:`StepRecord` at each step end; the profile
(:mod:`traindoctor.runtime.profile`) summarises the records.

**The doctor's own time.** Every wrapper on the training hot path (the DataLoader's ``next()``,
the root model's ``__call__``, ``backward()``, ``Tensor.backward``, the logits losses, the
optimizer's step hooks, host-to-device copies and synchronisations) reads the clock when it is
entered and when it returns, besides the two reads around the original call it times. The time
between them that is not the original call is the doctor's own work (its bookkeeping, the
monitors' hooks, CUDA events): it is added to :attr:`StepTimer.self_total`, and a timed call
subtracts the doctor's work that ran inside it (a wrapper nested in a forward). So every row is the
script's own time, and :attr:`StepRecord.doctor_s` is what watching the step cost: the step the
script would take unwatched is ``wall_s - doctor_s`` (:attr:`StepRecord.own_s`). What is not
measured this way: the Python call into a wrapper before its first clock read, torch calling the
optimizer's hooks, and the caches the doctor's code evicts (the script's own calls may run a little
slower watched); on steps of well under a millisecond these are a visible share, and the report
says so (:data:`traindoctor.runtime.profile.DOCTOR_SHARE_NOTED`).

torch's ``Optimizer.step`` wrapper runs a profiler ``record_function`` around the step hooks: the
script pays it unwatched too, but it lies outside the hooks the step is timed between. The
optimizer probe times it (a timing ``step`` on the class of each optimizer built during the
watch) and it counts in the optimizer row; for an optimizer built before the watch started its
cost is calibrated once (:attr:`StepTimer.step_wrapper_s`, an empty optimizer's step in a tight
loop: a lower bound, the same calls run slower between a step's other work).
"""

from __future__ import annotations

from typing import Any

from traindoctor.runtime.live import fields_repr
from traindoctor.runtime.phases import PHASE_BACKWARD, PHASE_FORWARD, PHASE_OPTIMIZER, PHASE_OTHER

#: The phases whose rows a wait for the GPU is taken out of.
_SYNC_ROWS = (PHASE_OTHER, PHASE_FORWARD, PHASE_BACKWARD, PHASE_OPTIMIZER)


class StepRecord:
    """Timings of one training step (seconds, wall clock).

    ``forward_s``/``backward_s`` are ``None`` when they were not measured in this step (no model
    forward seen yet); then ``other_s`` is ``None`` too and ``compute_s`` is the whole remainder.
    """

    __slots__ = (
        "backward_calls",
        "backward_s",
        "batches",
        "closure_backward_calls",
        "data_s",
        "device_s",
        "doctor_s",
        "end",
        "flop_counted",
        "forward_s",
        "index",
        "optimizer_s",
        "samples",
        "start",
        "sync_s",
        "tokens",
        "transfer_s",
    )

    index: int
    start: float
    end: float
    data_s: float
    transfer_s: float
    optimizer_s: float
    batches: int
    samples: int
    backward_calls: int
    device_s: float | None
    forward_s: float | None
    backward_s: float | None
    #: Of ``backward_calls``, those run inside ``optimizer.step()`` by a closure (LBFGS re-evaluates
    #: the loss up to ``max_iter`` times on the same batch; Lightning runs the step's backward
    #: there): they are not gradient accumulation.
    closure_backward_calls: int
    #: Host seconds blocked waiting for the GPU (``.item()``, ...); 0 on a CPU run.
    sync_s: float
    #: Tokens of the step's batches (None unless every batch held token ids).
    tokens: int | None
    #: Whether the FLOPs probe counted this step (it ran slower: left out of the steady means).
    flop_counted: bool
    #: The doctor's own host time inside the step (its wrappers' work, measured at their
    #: boundaries; see the module docstring): the script would take ``wall_s - doctor_s``.
    doctor_s: float

    def __init__(
        self,
        index: int,
        start: float,
        end: float,
        data_s: float,
        transfer_s: float,
        optimizer_s: float,
        batches: int,
        samples: int,
        backward_calls: int,
        device_s: float | None = None,
        forward_s: float | None = None,
        backward_s: float | None = None,
        closure_backward_calls: int = 0,
        sync_s: float = 0.0,
        tokens: int | None = None,
        doctor_s: float = 0.0,
    ) -> None:
        self.index = index
        self.start = start
        self.end = end
        self.data_s = data_s
        self.transfer_s = transfer_s
        self.optimizer_s = optimizer_s
        self.batches = batches
        self.samples = samples
        self.backward_calls = backward_calls
        self.device_s = device_s
        self.forward_s = forward_s
        self.backward_s = backward_s
        self.closure_backward_calls = closure_backward_calls
        self.sync_s = sync_s
        self.tokens = tokens
        self.flop_counted = False
        self.doctor_s = doctor_s

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    @property
    def accumulated_backward_calls(self) -> int:
        """Backward calls that accumulate gradients into this step: the ones outside the
        optimizer step, plus one for a closure's (however often it re-evaluates)."""
        inside = self.closure_backward_calls
        return self.backward_calls - inside + (1 if inside else 0)

    @property
    def wall_s(self) -> float:
        """The step's wall time, watched (the doctor's own work included)."""
        return max(self.end - self.start, 0.0)

    @property
    def own_s(self) -> float:
        """The step's time without the doctor's own work: what the script takes unwatched. Never
        less than the phases measured inside the step (data wait, copies, optimizer, GPU waits):
        the doctor's work that ran inside one of them is in that phase's time too, and taking it
        out twice would make the profile's rows add up to more than the step."""
        measured = self.data_s + self.transfer_s + self.optimizer_s + self.sync_s
        return max(self.wall_s - self.doctor_s, min(measured, self.wall_s), 0.0)

    @property
    def remainder_s(self) -> float:
        """The script's own time outside data wait, copies, the optimizer step and waits for the GPU."""
        return max(self.own_s - self.data_s - self.transfer_s - self.optimizer_s - self.sync_s, 0.0)

    @property
    def compute_s(self) -> float:
        """Forward + backward when measured, else the whole remainder (the old meaning)."""
        if self.forward_s is None or self.backward_s is None:
            return self.remainder_s
        return min(self.forward_s + self.backward_s, self.remainder_s)

    @property
    def other_s(self) -> float | None:
        """Host work between the measured calls; None when forward/backward were not measured."""
        if self.forward_s is None or self.backward_s is None:
            return None
        return max(self.remainder_s - self.forward_s - self.backward_s, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "wall_s": self.wall_s,
            "doctor_s": self.doctor_s,
            "data_s": self.data_s,
            "transfer_s": self.transfer_s,
            "forward_s": self.forward_s,
            "backward_s": self.backward_s,
            "compute_s": self.compute_s,
            "optimizer_s": self.optimizer_s,
            "other_s": self.other_s,
            "sync_s": self.sync_s or None,  # None (no timeline series) when nothing waited
            "batches": self.batches,
            "tokens": self.tokens,
            "samples": self.samples,
            "backward_calls": self.backward_calls,
            "closure_backward_calls": self.closure_backward_calls,
            "device_s": self.device_s,
        }


class StepTimer:
    """Accumulates the current step's timings; closes a :class:`StepRecord` at each step end.

    Called by the session from the probes' wrappers, so every method is a few additions.
    ``forward_total``/``backward_total`` are running totals over the run (the optimizer step
    subtracts what a closure ran inside it, and a wait for the GPU inside them is taken out of
    them: it is ``sync_total``'s); ``forward_seen`` says forward timing is active.
    ``self_total`` is the doctor's own time so far (the wrappers add to it, see the module
    docstring); ``step_wrapper_s`` the calibrated cost of torch's step wrapper outside the hooks.
    """

    def __init__(self) -> None:
        self.records: list[StepRecord] = []
        self._start: float | None = None
        self._data = 0.0
        self._transfer = 0.0
        self._optimizer = 0.0
        self._batches = 0
        self._samples = 0
        self._tokens = 0
        self._token_batches = 0
        self._sync = 0.0
        self.sync_total = 0.0
        self._backward = 0
        self._closure_backward = 0
        self._opt_pre: float | None = None
        self.forward_total = 0.0
        self.backward_total = 0.0
        self.forward_seen = False
        self.phase = PHASE_OTHER
        self._step_fwd0 = 0.0
        self._step_bwd0 = 0.0
        self._step_fwd_seen = False
        self._opt_inner0 = 0.0
        self.self_total = 0.0
        self._step_self0 = 0.0
        self.step_wrapper_s = 0.0

    @property
    def backward_calls(self) -> int:
        return self._backward

    def add_batch(self, wait_s: float, t_end: float, samples: int, tokens: int | None = None) -> None:
        if self._start is None:
            self._start = t_end - wait_s
        self._data += wait_s
        self._batches += 1
        self._samples += samples
        if tokens is not None:
            self._tokens += tokens
            self._token_batches += 1

    def add_data_wait(self, wait_s: float, t_end: float) -> None:
        """Time inside a DataLoader's ``next()`` that brought no batch: the call that ends an
        epoch (a worker loader shuts its worker processes down in it). Data wait, no batch."""
        if self._start is None:
            self._start = t_end - wait_s
        self._data += wait_s

    def add_sync(self, seconds: float, phase: int) -> None:
        """The host waited ``seconds`` for the GPU (``.item()``, ...) inside ``phase``: the wait
        leaves that phase's row (a wait inside a DataLoader fetch or a copy stays there)."""
        if phase not in _SYNC_ROWS:
            return
        if phase == PHASE_FORWARD:
            self.forward_total -= seconds
        elif phase == PHASE_BACKWARD:
            self.backward_total -= seconds
        self._sync += seconds
        self.sync_total += seconds

    def add_transfer(self, seconds: float, t_end: float) -> None:
        if self._start is None:
            self._start = t_end - seconds
        self._transfer += seconds

    def add_backward(self, seconds: float = 0.0) -> None:
        self._backward += 1
        if self.phase == PHASE_OPTIMIZER:  # called from a closure inside optimizer.step()
            self._closure_backward += 1
        self.backward_total += seconds

    def add_forward(self, seconds: float) -> None:
        self.forward_total += seconds

    def optimizer_pre(self, t: float, outside_s: float | None = None) -> None:
        """An optimizer step's hooks start at ``t``; ``outside_s``: torch's step wrapper before
        them, measured (None: not measured, the calibrated :attr:`step_wrapper_s` counts for the
        whole wrapper; see the module docstring)."""
        if self._start is None:
            self._start = t
        self._optimizer += self.step_wrapper_s if outside_s is None else outside_s
        self._opt_pre = t
        self._opt_inner0 = self.forward_total + self.backward_total + self.sync_total + self.self_total

    def add_optimizer_tail(self, seconds: float) -> None:
        """torch's step wrapper after the hooks (measured): the optimizer row of the step that
        follows the hooks' end (a step closes at the end of its optimizer's hooks)."""
        self._optimizer += seconds

    def optimizer_post(self, t: float, closes_step: bool) -> StepRecord | None:
        if self._opt_pre is not None:
            # a closure's forward and backward, every wait for the GPU and the doctor's own work
            inner = self.forward_total + self.backward_total + self.sync_total + self.self_total - self._opt_inner0
            self._optimizer += max(t - self._opt_pre - inner, 0.0)
            self._opt_pre = None
        if not closes_step:
            return None
        start = self._start if self._start is not None else t
        measured = self._step_fwd_seen
        record = StepRecord(
            index=len(self.records) + 1,
            start=start,
            end=t,
            data_s=self._data,
            transfer_s=self._transfer,
            optimizer_s=self._optimizer,
            batches=self._batches,
            samples=self._samples,
            backward_calls=self._backward,
            closure_backward_calls=self._closure_backward,
            forward_s=self.forward_total - self._step_fwd0 if measured else None,
            backward_s=self.backward_total - self._step_bwd0 if measured else None,
            sync_s=self._sync,
            tokens=self._tokens if self._batches and self._token_batches == self._batches else None,
            doctor_s=self.self_total - self._step_self0,
        )
        self._step_self0 = self.self_total
        self.records.append(record)
        self._start = t
        self._data = self._transfer = self._optimizer = self._sync = 0.0
        self._batches = self._samples = self._backward = self._closure_backward = 0
        self._tokens = self._token_batches = 0
        self._step_fwd0, self._step_bwd0 = self.forward_total, self.backward_total
        self._step_fwd_seen = self.forward_seen  # timing active for the whole next step
        return record
