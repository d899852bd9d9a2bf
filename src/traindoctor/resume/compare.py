"""Compare the uninterrupted run with interrupted + resumed, and name the cause of a divergence.

Inputs are the recorders' JSON records and final-state files. The verdict is decided by the
per-step losses and the final model/optimizer state only; everything else (learning rates, loss
scales, batch and RNG digests, epoch values, the detail snapshot of model and optimizer state at
the first resumed step) serves to explain *why* they differ. Causes are tried in the order in
which one explains the others: model, optimizer state, scheduler, loss scale, epoch counter
(``set_epoch``), RNG streams that restarted (seeded again at start-up: they replay an earlier
step's state), a batch one epoch away, data order, RNG; only a hypothesis whose evidence lies at
or before the first divergent step can explain it, and "cannot tell" is the answer when none
does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

CAUSE_MODEL = "model state not restored"
CAUSE_OPTIMIZER = "optimizer state lost (momentum/moments zero after resume)"
CAUSE_OPTIMIZER_DIFF = "optimizer state differs after resume"
CAUSE_SCHEDULER = "scheduler restarted (LR differs)"
CAUSE_SCALER = "loss scale reset"
CAUSE_EPOCH = "epoch counter off by one"
CAUSE_DATA = "data order differs"
CAUSE_RNG = "RNG not restored"
CAUSE_NONDETERMINISM = "run is not deterministic"
CAUSE_UNKNOWN = "cannot tell"


@dataclass
class Verdict:
    exact: bool
    summary: str
    checkpoint_step: int | None = None
    first_step: int | None = None
    cause: str | None = None
    explanation: str | None = None
    also: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "exact": self.exact,
            "summary": self.summary,
            "checkpoint_step": self.checkpoint_step,
            "first_divergent_step": self.first_step,
            "cause": self.cause,
            "explanation": self.explanation,
            "also": self.also,
            "notes": self.notes,
        }


def _floats(values: list[str] | None) -> list[float]:
    return [float.fromhex(v) for v in values or []]


def losses_equal(a: list[str] | None, b: list[str] | None, tol: float) -> bool:
    if tol <= 0:
        return (a or []) == (b or [])
    fa, fb = _floats(a), _floats(b)
    return len(fa) == len(fb) and all(
        x == y or (math.isnan(x) and math.isnan(y)) or abs(x - y) <= tol * max(abs(x), abs(y), 1e-12)
        for x, y in zip(fa, fb)
    )


def _fmt_loss(values: list[str] | None) -> str:
    fs = _floats(values)
    if not fs:
        return "no loss"
    return ", ".join(f"{v:.6g}" if v == v else "nan" for v in fs)


def _step(record: dict[str, Any], s: int) -> dict[str, Any]:
    step: dict[str, Any] = record.get("steps", {}).get(str(s), {})
    return step


def _loss(record: dict[str, Any], s: int) -> list[str] | None:
    losses: list[str] | None = record.get("losses", {}).get(str(s))
    return losses


def tensors_close(a: Any, b: Any, tol: float) -> bool:
    """Two tensors of one shape and dtype equal: bitwise when ``tol <= 0`` (NaN equal to NaN),
    else within a relative tolerance of the tensor's own scale:
    ``max|a - b| <= tol * max(max|a|, max|b|)``, so a near-zero element (an Adam moment) is
    judged against the tensor's magnitude, not against an absolute floor. Both tensors are
    moved to the CPU first (one at a time: no whole state is copied to float64 on a device)."""
    import torch

    a, b = a.detach().cpu(), b.detach().cpu()
    if not a.is_floating_point() and not a.is_complex():
        return bool(torch.equal(a, b))
    if tol <= 0:
        return bool(
            torch.equal(a, b)
            or (torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0)))
        )
    return relative_difference(a, b) <= tol


def relative_difference(a: Any, b: Any) -> float:
    """``max|a - b| / max(max|a|, max|b|)`` of two same-shaped tensors, computed in float64 on
    the CPU (0 for equal tensors, NaN positions equal to NaN; ``inf`` when NaNs differ)."""
    import torch

    a, b = a.detach().cpu().double(), b.detach().cpu().double()
    if not torch.equal(a.isnan(), b.isnan()):
        return math.inf
    a, b = a.nan_to_num(0.0), b.nan_to_num(0.0)
    if a.numel() == 0 or torch.equal(a, b):
        return 0.0
    scale = float(torch.maximum(a.abs().max(), b.abs().max()))
    diff = float((a - b).abs().max())
    return diff / scale if scale > 0 else math.inf


def compare_states(a: Any, b: Any, tol: float, path: str = "") -> list[str]:
    """Key paths where two loaded final states differ (bitwise, or within the relative ``tol``
    of :func:`tensors_close`). Load the states with ``map_location="cpu"``."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return [path]
        return [] if tensors_close(a, b, tol) else [path]
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in sorted(set(a) | set(b), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in a or key not in b:
                out.append(sub)
            else:
                out.extend(compare_states(a[key], b[key], tol, sub))
        return out
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return [path]
        out = []
        for index, (x, y) in enumerate(zip(a, b)):
            out.extend(compare_states(x, y, tol, f"{path}[{index}]"))
        return out
    if isinstance(a, float) and isinstance(b, float) and tol > 0:
        return [] if abs(a - b) <= tol * max(abs(a), abs(b), 1e-12) else [path]
    return [] if a == b else [path]


def noise_floor(a: Any, b: Any) -> float:
    """The largest relative difference (:func:`relative_difference`) between two final states
    of the same structure (two uninterrupted runs): how far nondeterministic kernels move
    them. ``inf`` when the structures differ."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return math.inf
        if not a.is_floating_point():
            return 0.0 if torch.equal(a.cpu(), b.cpu()) else math.inf
        return relative_difference(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return math.inf
        return max((noise_floor(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return math.inf
        return max((noise_floor(x, y) for x, y in zip(a, b)), default=0.0)
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) / max(abs(a), abs(b), 1e-12)
    return 0.0 if a == b else math.inf


def loss_noise(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest relative difference between two runs' per-step losses."""
    worst = 0.0
    for step, values in (a.get("losses") or {}).items():
        other = (b.get("losses") or {}).get(step)
        fa, fb = _floats(values), _floats(other)
        if len(fa) != len(fb):
            return math.inf
        for x, y in zip(fa, fb):
            if math.isnan(x) and math.isnan(y):
                continue
            worst = max(worst, abs(x - y) / max(abs(x), abs(y), 1e-12))
    return worst


def _model_cause(ref: dict[str, Any], res: dict[str, Any]) -> str | None:
    mr, ms = ref.get("model"), res.get("model")
    if not mr or not ms:
        return None
    differing = []
    for root, tensors in sorted(mr.items()):
        other = ms.get(root, {})
        differing += [name for name, digest in sorted(tensors.items()) if other.get(name) != digest]
    if not differing:
        return None
    shown = ", ".join(differing[:4]) + (f" and {len(differing) - 4} more" if len(differing) > 4 else "")
    return f"{len(differing)} model tensor(s) differ when the resumed run starts: {shown}"


def _optimizer_cause(ref: dict[str, Any], res: dict[str, Any]) -> tuple[str, str] | None:
    for index, summary in sorted((ref.get("optimizer") or {}).items()):
        other = (res.get("optimizer") or {}).get(index)
        if other is None:
            continue
        kinds_ref, kinds_res = summary["kinds"], other["kinds"]
        tensor_kinds = [k for k, v in kinds_ref.items() if not v["all_zero"]]
        lost = [k for k in tensor_kinds if k not in kinds_res or kinds_res[k]["all_zero"]]
        if summary["params_with_state"] and (not other["params_with_state"] or lost):
            what = ", ".join(lost or sorted(kinds_ref))
            held = "held no state" if not other["params_with_state"] else f"has {what} all zero"
            return CAUSE_OPTIMIZER, (
                f"when the resumed run took its first step the optimizer {held}; the "
                f"uninterrupted run had {what} for {summary['params_with_state']} parameter(s)"
            )
        differing = [k for k in sorted(kinds_ref) if kinds_res.get(k, {}).get("digest") != kinds_ref[k]["digest"]]
        if differing:
            return CAUSE_OPTIMIZER_DIFF, (f"optimizer state {', '.join(differing)} differs at the first resumed step")
    return None


def _rng_names(a: dict[str, str] | None, b: dict[str, str] | None) -> list[str]:
    a, b = a or {}, b or {}
    names = {"torch": "torch CPU", "cuda": "CUDA", "numpy": "NumPy", "python": "Python random"}
    return [names.get(k, k) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _epoch_shift(ref: dict[str, Any], res: dict[str, Any], s: int, last: int, lengths: list[int]) -> str | None:
    """If the resumed batches are the uninterrupted run's shifted by an epoch, say so."""
    inputs = _step(res, s).get("inputs")
    if inputs is None:
        return None
    for t in range(1, last + 1):
        if t != s and _step(ref, t).get("inputs") == inputs:
            shift = t - s
            if abs(shift) in lengths:
                direction = "repeats" if shift < 0 else "skips"
                return (
                    f"the resumed run's batch at step {s} is the uninterrupted run's batch of "
                    f"step {t}, exactly one epoch ({abs(shift)} batches) away: it {direction} "
                    "an epoch"
                )
            return (
                f"the resumed run's batch at step {s} is the uninterrupted run's batch of "
                f"step {t}: the data position was not restored"
            )
    return None


def seeded_generators(ref: dict[str, Any], intr: dict[str, Any]) -> set[str]:
    """Generators whose state agrees between the two fresh runs at their first step.

    An unseeded generator (NumPy's and ``random``'s are seeded from the OS at start-up) differs
    between any two processes; a difference after resume says nothing about the resume there.
    """
    a, b = _step(ref, 1).get("rng") or {}, _step(intr, 1).get("rng") or {}
    return {name for name in a if a.get(name) == b.get(name)}


def _rng_replay(
    ref: dict[str, Any], res: dict[str, Any], s: int, first: int, seeded: set[str] | None
) -> tuple[int, list[str]] | None:
    """(t, generators) when the resumed run's seeded generators at step ``s`` are in the state
    the uninterrupted run's had at an earlier step ``t``: they were seeded again at start-up and
    not restored, so their draws (a shuffle, dropout) repeat from step ``t``."""
    rng_b = {n: d for n, d in (_step(res, s).get("rng") or {}).items() if seeded is None or n in seeded}
    rng_now = {n: d for n, d in (_step(ref, s).get("rng") or {}).items() if seeded is None or n in seeded}
    differing = [n for n in rng_b if rng_b[n] != rng_now.get(n)]
    if not differing:
        return None
    for t in range(1, first):
        earlier = _step(ref, t).get("rng") or {}
        if all(earlier.get(n) == rng_b[n] for n in differing):
            return t, _rng_names({n: rng_b[n] for n in differing}, None)
    return None


#: Hypotheses in the order in which one explains the others: a restored-state difference
#: explains everything after it; a generator that restarts explains the batches it shuffles.
_ORDER = [
    CAUSE_MODEL,
    CAUSE_OPTIMIZER,
    CAUSE_OPTIMIZER_DIFF,
    CAUSE_SCHEDULER,
    CAUSE_SCALER,
    "epoch:set_epoch",
    "rng:replay",
    "epoch:shift",
    CAUSE_DATA,
    CAUSE_RNG,
]


def diagnose(
    ref: dict[str, Any],
    res: dict[str, Any],
    k: int,
    last: int,
    ref_last: int,
    seeded: set[str] | None = None,
    divergent: int | None = None,
) -> tuple[str, str, int, list[str]]:
    """(cause, explanation, step of the evidence, other differences) at the resume point.

    Each hypothesis (model, optimizer, scheduler, loss scale, epoch counter, RNG streams, data
    order) is tested against what both runs recorded from the first resumed step on; the cause
    is the first one, in :data:`_ORDER`, whose evidence lies at or before ``divergent`` (the
    first divergent step, when known). :data:`CAUSE_UNKNOWN` ("cannot tell") when none does,
    or when two explain the same batch equally well (a batch one epoch away while the
    generators differ too)."""
    first = k + 1
    found: list[tuple[str, str, int]] = []
    detail_ref, detail_res = _step(ref, first), _step(res, first)
    model = _model_cause(detail_ref, detail_res)
    if model:
        found.append((CAUSE_MODEL, model, first))
    opt = _optimizer_cause(detail_ref, detail_res)
    if opt:
        found.append((opt[0], opt[1], first))
    lengths = sorted(set(ref.get("loader_lengths", [])) | set(res.get("loader_lengths", [])))
    seen: set[str] = set()
    for s in range(first, min(last, ref_last) + 1):
        a, b = _step(ref, s), _step(res, s)
        if "lr" not in seen and a.get("lr") != b.get("lr") and "lr" in b:
            seen.add("lr")
            found.append(
                (
                    CAUSE_SCHEDULER,
                    f"at step {s} the learning rate is "
                    f"{_lrs(b.get('lr'))}, the uninterrupted run had {_lrs(a.get('lr'))}",
                    s,
                )
            )
        if "scale" not in seen and a.get("scale") != b.get("scale"):
            seen.add("scale")
            found.append(
                (
                    CAUSE_SCALER,
                    f"at step {s} the GradScaler scale is "
                    f"{_scales(b.get('scale'))}, the uninterrupted run had "
                    f"{_scales(a.get('scale'))}",
                    s,
                )
            )
        ea, eb = _epoch_at(ref, s, 1), _epoch_at(res, s, first)
        if "epoch" not in seen and eb is not None and ea != eb:
            seen.add("epoch")
            off = isinstance(ea, int) and isinstance(eb, int) and abs(ea - eb) == 1
            found.append(
                (
                    "epoch:set_epoch" if off else CAUSE_DATA,
                    f"at step {s} set_epoch({eb}) was called; the uninterrupted run was in epoch {ea}",
                    s,
                )
            )
        rng_a = {n: d for n, d in (a.get("rng") or {}).items() if seeded is None or n in seeded}
        rng_b = {n: d for n, d in (b.get("rng") or {}).items() if seeded is None or n in seeded}
        if "inputs" not in seen and a.get("inputs") != b.get("inputs"):
            seen.add("inputs")
            replay = _rng_replay(ref, res, s, first, seeded)
            shift = _epoch_shift(ref, res, s, ref_last, lengths)
            if replay is not None:
                seen.add("rng")  # the same difference, explained
                t, names = replay
                same = _step(ref, t).get("inputs") == b.get("inputs")
                found.append(
                    (
                        "rng:replay",
                        f"at step {s} the resumed run's {', '.join(names)} generator is in the state the "
                        f"uninterrupted run's had at step {t}: it was seeded again at start-up and its "
                        "state is not in the checkpoint, so "
                        + (f"it draws step {t}'s batch again" if same else f"its draws repeat from step {t}")
                        + " (save the generator's state with the checkpoint and restore it)",
                        s,
                    )
                )
            elif shift and "one epoch" in shift:
                found.append(("epoch:shift", shift, s))
            else:
                found.append((CAUSE_DATA, shift or f"the batch at step {s} differs from the uninterrupted run's", s))
        if "rng" not in seen and rng_a != rng_b and "rng" in b:
            seen.add("rng")
            names = _rng_names(rng_a, rng_b)
            found.append(
                (CAUSE_RNG, f"at step {s} the state of {', '.join(names)} differs from the uninterrupted run's", s)
            )
    return _pick(found, first, divergent)


def _pick(found: list[tuple[str, str, int]], first: int, divergent: int | None) -> tuple[str, str, int, list[str]]:
    """The hypothesis that explains the first divergent step (see :func:`diagnose`)."""
    public = {"epoch:set_epoch": CAUSE_EPOCH, "epoch:shift": CAUSE_EPOCH, "rng:replay": CAUSE_RNG}
    found.sort(key=lambda item: (_ORDER.index(item[0]), item[2]))
    explaining = [f for f in found if divergent is None or f[2] <= divergent]
    later = [f for f in found if f not in explaining]
    if not explaining:
        shown = "; ".join(f"{public.get(c, c)}: {e}" for c, e, _ in later)
        return (
            CAUSE_UNKNOWN,
            "cannot tell: weights, optimizer state, learning rate, loss scale, epoch counter, data "
            "and RNG all match up to the first divergent step; state kept outside the model and "
            "optimizer, or non-deterministic kernels, may differ" + (f" (later: {shown})" if shown else ""),
            first,
            [],
        )
    cause, explanation, step = explaining[0]
    if cause == "epoch:shift":
        rng = next((f for f in explaining if f[0] == CAUSE_RNG and f[2] <= step), None)
        if rng is not None:  # an epoch counter off by one, or a shuffle from a generator not restored
            return (
                CAUSE_UNKNOWN,
                f"cannot tell: {explanation} (an epoch counter off by one), and {rng[1]} (RNG not restored): "
                "either explains this batch",
                step,
                [f"{public.get(c, c)}: {e}" for c, e, _ in explaining[1:] + later if (c, e) != rng[:2]],
            )
    also = [f"{public.get(c, c)}: {e}" for c, e, _ in explaining[1:] + later]
    return public.get(cause, cause), explanation, step, also


def _epoch_at(record: dict[str, Any], s: int, since: int) -> int | None:
    """The last epoch passed to ``set_epoch`` at or before step ``s`` (from step ``since``)."""
    for t in range(s, since - 1, -1):
        epoch = _step(record, t).get("epoch")
        if epoch is not None:
            return int(epoch)
    return None


def _lrs(value: dict[str, list[float]] | None) -> str:
    if not value:
        return "unknown"
    flat = [lr for key in sorted(value) for lr in value[key]]
    return ", ".join(f"{lr:.6g}" for lr in flat)


def _scales(value: list[float] | None) -> str:
    return ", ".join(f"{v:g}" for v in value) if value else "none"


def compare_runs(
    ref: dict[str, Any], intr: dict[str, Any], res: dict[str, Any], final_diff: list[str] | None, steps: int, tol: float
) -> Verdict:
    """The verdict from the three records (and the final-state differences, if computed)."""
    k = int(intr["checkpoint_step"])
    for s in range(1, k + 1):
        if not losses_equal(_loss(ref, s), _loss(intr, s), tol):
            return Verdict(
                False,
                f"two uninterrupted runs already differ at step {s}: the run "
                "is not deterministic, so resume cannot be checked",
                checkpoint_step=k,
                first_step=s,
                cause=CAUSE_NONDETERMINISM,
                explanation=f"loss {_fmt_loss(_loss(intr, s))} vs "
                f"{_fmt_loss(_loss(ref, s))}; seed every generator and use "
                "deterministic algorithms",
            )
    res_last = int(res.get("last_step", k))
    ref_last = int(ref.get("last_step", steps))
    first_loss = None
    for s in range(k + 1, min(res_last, ref_last) + 1):
        if not losses_equal(_loss(ref, s), _loss(res, s), tol):
            first_loss = s
            break
    short = res_last < steps
    if first_loss is None and not short and not final_diff:
        verdict = Verdict(
            True,
            f"resume is exact: {steps} steps, per-step losses and final "
            "model/optimizer state identical" + (" (bitwise)" if tol <= 0 else f" (within relative {tol:g})"),
            checkpoint_step=k,
        )
        cause, explanation, _, also = diagnose(ref, res, k, res_last, ref_last, seeded_generators(ref, intr))
        if cause != CAUSE_UNKNOWN:
            verdict.notes.append(f"{cause}: {explanation} (without effect on this run)")
        return verdict
    cause, explanation, _, also = diagnose(
        ref, res, k, res_last, ref_last, seeded_generators(ref, intr), divergent=first_loss
    )
    if first_loss is not None:
        where = (
            f"first divergent step {first_loss}: loss {_fmt_loss(_loss(res, first_loss))}"
            f" after resume, {_fmt_loss(_loss(ref, first_loss))} uninterrupted"
        )
        first = first_loss
    elif short:
        where = f"the resumed run stopped at step {res_last}; the uninterrupted run reached {steps}"
        first = res_last + 1
    else:
        shown = ", ".join((final_diff or [])[:4])
        where = f"losses match but the final state differs ({shown})"
        first = steps
    return Verdict(
        False,
        f"resume is NOT exact: {where}",
        checkpoint_step=k,
        first_step=first,
        cause=cause,
        explanation=explanation,
        also=also,
    )
