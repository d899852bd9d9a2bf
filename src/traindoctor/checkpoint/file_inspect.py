"""One torch checkpoint file, read without executing or importing anything from it.

:mod:`traindoctor.checkpoint.archive` reads the zip archive's ``data.pkl`` (or a raw pickle) with
:mod:`traindoctor.checkpoint.pickle_reader`, within the inspection's limits. This module walks
the result once: it lists the tensors (dtype, shape, bytes) and recognises the model, optimizer,
scheduler, GradScaler, RNG and data-position states by their shape;
:func:`~traindoctor.checkpoint.inspection.resume_gaps` says what a resume from it would lack.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from traindoctor.checkpoint.archive import read_torch_file
from traindoctor.checkpoint.inspection import CheckpointReadError, Component, Inspection, resume_gaps
from traindoctor.checkpoint.limits import Budget, LimitExceeded
from traindoctor.checkpoint.pickle_values import Call, TensorInfo, describe
from traindoctor.units import format_bytes

CPU_RNG_BYTES = 5056  # size of torch's CPU Mersenne Twister state
#: Key paths are shortened in the middle beyond this many characters (a crafted stream may
#: nest long keys a thousand deep).
MAX_PATH = 400
_MAX_KEY = 200
#: Param groups detailed per optimizer.
MAX_GROUPS_SHOWN = 1000


@dataclass(slots=True)
class Visit:
    """One (key path, value) pair of :func:`walk`.

    ``repeat``: a container already visited under another path (its children are not visited
    again). ``inside``: an ancestor was claimed. Set ``claimed`` to mark this value's subtree.
    """

    path: str
    value: Any
    inside: bool = False
    repeat: bool = False
    claimed: bool = False


def _join(here: str, key: Any) -> str:
    segment = key if isinstance(key, str) else describe(key)
    if len(segment) > _MAX_KEY:
        segment = segment[: _MAX_KEY - 1] + "…"
    path = f"{here}.{segment}" if here else segment
    if len(path) > MAX_PATH:
        path = path[:100] + "…" + path[-(MAX_PATH - 101) :]
    return path


def walk(value: Any, budget: Budget, path: str = "") -> Iterator[Visit]:
    """Every (key path, value) pair in pre-order, each container's children once.

    Iterative (a crafted stream may nest thousands deep), visiting shared containers once
    (memo references can make a small stream describe an exponentially large tree), and
    charging each visit to ``budget``; deeper than its depth limit is refused.
    """
    seen: set[int] = set()
    stack: list[tuple[str, Any, bool, int]] = [(path, value, False, 0)]
    max_depth = budget.limits.depth
    while stack:
        here, item, inside, depth = stack.pop()
        budget.spend_items()
        container = isinstance(item, (dict, list, tuple, Call))
        visit = Visit(here, item, inside, container and id(item) in seen)
        yield visit
        if not container or visit.repeat:
            continue
        seen.add(id(item))
        if isinstance(item, Call):
            pairs = _object_children(item)
        elif isinstance(item, dict):
            pairs = list(item.items())
        else:
            pairs = list(enumerate(item))
        if not pairs:
            continue
        if depth >= max_depth:
            raise LimitExceeded(f"pickle nests deeper than {max_depth} levels", "depth", max_depth)
        inner = inside or visit.claimed
        stack.extend((_join(here, key), child, inner, depth + 1) for key, child in reversed(pairs))


_MODULE_SLOTS = ("_parameters", "_buffers", "_modules")


def _object_children(call: Call) -> list[tuple[Any, Any]]:
    """The attributes a pickled object would get (its BUILD state), never the object itself.

    For an ``nn.Module`` the ``_parameters``/``_buffers``/``_modules`` levels are folded, so
    keys read like ``state_dict`` keys (``encoder.0.weight``).
    """
    state = call.state
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[1], dict):
        state = {**(state[0] if isinstance(state[0], dict) else {}), **state[1]}
    if not isinstance(state, dict):
        return []
    pairs: list[tuple[Any, Any]] = []
    for key, value in state.items():
        if key in _MODULE_SLOTS and isinstance(value, dict):
            pairs.extend((k, v) for k, v in value.items() if v is not None)
        elif not (isinstance(key, str) and key.startswith("_")):
            pairs.append((key, value))
    return pairs


def _is_module(value: Any) -> bool:
    return (
        isinstance(value, Call)
        and isinstance(value.state, dict)
        and "_parameters" in value.state
        and "_modules" in value.state
    )


def _is_state_dict(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and len(value) > 0
        and all(isinstance(k, str) for k in value)
        and all(isinstance(v, TensorInfo) for v in value.values())
        and any(v.dtype.startswith(("float", "bfloat")) for v in value.values())
    )


def _is_optimizer(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and "state" in value
        and "param_groups" in value
        and isinstance(value["param_groups"], list)
    )


def _is_scheduler(value: Any) -> bool:
    return isinstance(value, dict) and "last_epoch" in value and ("base_lrs" in value or "_last_lr" in value)


def _is_scaler(value: Any) -> bool:
    return isinstance(value, dict) and "scale" in value and "_growth_tracker" in value


def _is_cpu_rng(value: Any) -> bool:
    return isinstance(value, TensorInfo) and value.dtype == "uint8" and value.shape == (CPU_RNG_BYTES,)


def _is_cuda_rng(path: str, value: Any) -> bool:
    return (
        isinstance(value, TensorInfo)
        and value.dtype == "uint8"
        and value.shape in ((16,), (8,))
        and "cuda" in path.lower()
    )


def _is_numpy_rng(path: str, value: Any) -> bool:
    if isinstance(value, (tuple, list)) and value and value[0] == "MT19937":
        return True
    return isinstance(value, dict) and value.get("kind") == "MT19937"


def _is_python_rng(value: Any) -> bool:
    if (
        isinstance(value, (tuple, list))
        and len(value) == 3
        and value[0] == 3
        and isinstance(value[1], (tuple, list))
        and len(value[1]) == 625
    ):
        return True
    return (
        isinstance(value, dict)
        and value.get("version") == 3
        and isinstance(value.get("state"), TensorInfo)
        and value["state"].shape == (625,)
    )


def _is_data_position(value: Any) -> bool:
    return isinstance(value, dict) and ("batches_done" in value or "samples_done" in value)


def _plain(value: Any, depth: int = 0) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)) and len(value) <= 4:
        if depth >= 3:
            return "(…)"
        return "(" + ", ".join(_plain(v, depth + 1) for v in value) + ")"
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, (int, str)):
        return describe(value, 200)
    return type(value).__name__


def _optimizer_component(path: str, value: dict[str, Any], budget: Budget) -> Component:
    raw_state = value.get("state")
    state: dict[Any, Any] = raw_state if isinstance(raw_state, dict) else {}
    budget.spend_items(len(state))
    buffers = sorted({str(k) for entry in state.values() if isinstance(entry, dict) for k in entry})
    groups = value["param_groups"]
    summary = f"optimizer state: {len(groups)} param group(s), state for {len(state)} param(s)" + (
        f" ({', '.join(buffers)})" if buffers else " (empty)"
    )
    details = []
    for index, group in enumerate(groups[:MAX_GROUPS_SHOWN]):
        if not isinstance(group, dict):
            continue
        params = group.get("params")
        shown = [
            f"{k}={_plain(group[k])}"
            for k in ("lr", "initial_lr", "momentum", "betas", "weight_decay", "eps")
            if k in group
        ]
        count = len(params) if isinstance(params, list) else "?"
        details.append(f"group {index}: params={count} " + " ".join(shown))
    if len(groups) > MAX_GROUPS_SHOWN:
        details.append(f"... {len(groups) - MAX_GROUPS_SHOWN} more param group(s)")
    return Component("optimizer", path, summary, details)


@dataclass
class Contents:
    """What one walk over a checkpoint's value found."""

    tensors: list[tuple[str, TensorInfo]] = field(default_factory=list)
    components: list[Component] = field(default_factory=list)
    #: What the reader noticed beside the components (see ``resume_gaps``), step and epoch.
    facts: dict[str, Any] = field(default_factory=dict)
    #: A whole pickled ``nn.Module`` is somewhere in the value.
    has_module: bool = False


def describe_contents(root: Any, budget: Budget) -> Contents:
    """Walk ``root`` once: its tensors, and its parts recognised by shape."""
    found = Contents(
        facts={
            "cuda_tensors": False,
            "initial_lr": False,
            "scaler_slots": [],
            "rng": set(),
            "step": None,
            "epoch": None,
        }
    )
    comps, facts = found.components, found.facts

    def add(component: Component) -> None:
        budget.spend_entries("components")
        comps.append(component)

    for visit in walk(root, budget):
        path, value = visit.path, visit.value
        label = path or "<root>"
        if isinstance(value, TensorInfo):
            budget.spend_entries("tensors")
            found.tensors.append((label, value))
            if value.device.startswith("cuda"):
                facts["cuda_tensors"] = True
        if visit.repeat:
            continue
        if _is_module(value):
            found.has_module = True
        if visit.inside:
            continue
        leaf = path.rsplit(".", 1)[-1].lower()
        if _is_module(value):
            inner = [v.value for v in walk(value, budget) if isinstance(v.value, TensorInfo)]
            params = sum(t.numel for t in inner)
            add(
                Component(
                    "model",
                    label,
                    f"whole pickled module {value.label}: "
                    f"{len(inner)} tensors, {params:,} values "
                    f"({format_bytes(sum(t.nbytes for t in inner))}); loading it "
                    "imports and runs its classes' code",
                )
            )
            visit.claimed = True
        elif _is_state_dict(value):
            params = sum(t.numel for t in value.values())
            nbytes = sum(t.nbytes for t in value.values())
            add(
                Component(
                    "model", label, f"model weights: {len(value)} tensors, {params:,} values ({format_bytes(nbytes)})"
                )
            )
            visit.claimed = True
        elif _is_optimizer(value):
            add(_optimizer_component(label, value, budget))
            visit.claimed = True
            if any(isinstance(g, dict) and "initial_lr" in g for g in value["param_groups"]):
                facts["initial_lr"] = True
        elif _is_scheduler(value):
            last = value.get("_last_lr")
            add(
                Component(
                    "scheduler",
                    label,
                    f"LR scheduler state: last_epoch="
                    f"{_plain(value.get('last_epoch'))}" + (f", last lr={_plain(last)}" if last is not None else ""),
                )
            )
            visit.claimed = True
        elif _is_scaler(value):
            add(Component("scaler", label, f"GradScaler state: scale={_plain(value.get('scale'))}"))
            visit.claimed = True
        elif "scaler" in leaf and (value is None or value == {}):
            budget.spend_entries("components")
            facts["scaler_slots"].append(label)
        elif _is_data_position(value):
            add(
                Component(
                    "data",
                    label,
                    "data position: epoch "
                    f"{_plain(value.get('epoch'))}, "
                    f"{_plain(value.get('batches_done'))} batches into it",
                )
            )
            visit.claimed = True
        elif _is_cpu_rng(value):
            facts["rng"].add("torch")
            add(Component("rng", label, "torch CPU RNG state"))
        elif _is_cuda_rng(path, value):
            facts["rng"].add("cuda")
            add(Component("rng", label, "CUDA RNG state"))
        elif _is_numpy_rng(path, value):
            facts["rng"].add("numpy")
            add(Component("rng", label, "NumPy RNG state"))
            visit.claimed = True
        elif _is_python_rng(value):
            facts["rng"].add("python")
            add(Component("rng", label, "Python random state"))
            visit.claimed = True
        elif leaf in ("step", "global_step", "iteration") and isinstance(value, int) and facts["step"] is None:
            facts["step"] = value
        elif leaf == "epoch" and isinstance(value, int) and facts["epoch"] is None:
            facts["epoch"] = value
    return found


def inspect_file(name: str, budget: Budget | None = None) -> Inspection:
    """Describe the torch file ``name`` (see :func:`traindoctor.checkpoint.inspect.inspect_checkpoint`)."""
    budget = budget or Budget()
    torch_file = read_torch_file(name, budget)
    result = torch_file.result
    zipped = torch_file.format == "zip"
    fmt = "torch zip" if zipped else "raw pickle (not a torch zip checkpoint)"
    unsafe = result.unsafe()
    contents = describe_contents(result.value, budget)
    tensors = contents.tensors
    missing = sorted(
        {t.storage_key for _, t in tensors if t.storage_key is not None and t.storage_key not in torch_file.storages}
    )
    if missing and zipped and not unsafe:
        raise CheckpointReadError(
            f"corrupt checkpoint: tensor data missing from the archive (storages {', '.join(missing[:5])})"
        )
    facts = contents.facts
    findings = resume_gaps(name, contents.components, facts) if zipped else []
    imports = sorted({u.ref.dotted for u in unsafe if u.called})
    return Inspection(
        path=name,
        format=fmt,
        size_bytes=torch_file.size,
        root=result.value,
        unsafe=unsafe,
        globals=sorted({u.ref.dotted for u in result.globals}),
        tensors=tensors,
        components=contents.components,
        findings=findings,
        step=facts["step"],
        epoch=facts["epoch"],
        missing_storages=missing,
        imports=imports if contents.has_module else [],
        collidable=result.collidable,
    )


def check_before_load(name: str, budget: Budget | None = None) -> None:
    """Refuse, before ``torch.load`` sees it, a file that traindoctor's reader would not pass.

    The whole file is read as ``ckpt inspect`` reads it (within ``budget``'s limits: a
    million-deep tuple or colliding keys are refused here, not a crash or an hour inside
    torch's unpickler) and one that names a global outside torch's weights_only allowlist is
    refused naming it. Raises :class:`CheckpointReadError`.
    """
    budget = budget or Budget()
    checked = inspect_file(name, budget)
    limit = budget.limits.collidable
    if checked.collidable > limit:
        raise LimitExceeded(
            f"{name}: {checked.collidable} large integers or float keys, whose hashes a crafted file makes "
            "collide (torch's unpickler would take quadratic time); not loaded",
            "collidable",
            limit,
        )
    if checked.unsafe:
        names = sorted({u.ref.dotted for u in checked.unsafe})
        raise CheckpointReadError(
            f"{name}: references {', '.join(names[:10])}, outside torch's weights_only allowlist; refusing to load it"
        )
