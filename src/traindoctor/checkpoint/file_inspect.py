"""One torch checkpoint file, read without executing or importing anything from it.

The zip archive is read with :mod:`zipfile`, its ``data.pkl`` with
:mod:`traindoctor.checkpoint.pickle_reader`. The result lists the entries (tensors with dtype,
shape and bytes) and recognises the model, optimizer, scheduler, GradScaler, RNG and
data-position states by their shape; :func:`~traindoctor.checkpoint.inspection.resume_gaps`
says what a resume from it would lack.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from typing import Any

from traindoctor.checkpoint.inspection import CheckpointReadError, Component, Inspection, resume_gaps
from traindoctor.checkpoint.pickle_reader import (
    Call,
    PickleError,
    ReadResult,
    TensorInfo,
    read_pickle,
)
from traindoctor.units import format_bytes

MAX_PICKLE_BYTES = 512 * 1024 * 1024
CPU_RNG_BYTES = 5056  # size of torch's CPU Mersenne Twister state
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C


def _read_zip(path: str) -> tuple[ReadResult, dict[str, int]]:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise CheckpointReadError(
            "corrupt or truncated checkpoint: the zip archive's directory is missing (was the write interrupted?)"
        ) from None
    with archive:
        pickles = [i for i in archive.infolist() if i.filename.endswith("data.pkl") and i.filename.count("/") == 1]
        if len(pickles) != 1:
            raise CheckpointReadError("zip file is not a torch checkpoint (no <name>/data.pkl)")
        info = pickles[0]
        if info.file_size > MAX_PICKLE_BYTES:
            raise CheckpointReadError(f"data.pkl is {info.file_size} bytes; refusing to read")
        prefix = info.filename[: -len("data.pkl")]
        try:
            data = archive.read(info)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise CheckpointReadError(f"corrupt checkpoint: {exc}") from None
        storages = {
            i.filename[len(prefix) + len("data/") :]: i.file_size
            for i in archive.infolist()
            if i.filename.startswith(prefix + "data/")
        }
    try:
        return read_pickle(data), storages
    except PickleError as exc:
        raise CheckpointReadError(f"corrupt checkpoint: {exc}") from None


def _read_raw_pickle(path: str) -> ReadResult:
    with open(path, "rb") as fh:
        data = fh.read(MAX_PICKLE_BYTES)
    try:
        return read_pickle(data)
    except PickleError as exc:
        raise CheckpointReadError(f"not a readable checkpoint: {exc}") from None


def walk(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every (key path, value) pair in pre-order, each container once.

    Iterative (a crafted stream may nest thousands deep) and visiting shared containers once
    (memo references can make a small stream describe an exponentially large tree).
    """
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack:
        here, item = stack.pop()
        yield here, item
        if id(item) in seen:
            continue
        if isinstance(item, Call):
            pairs = _object_children(item)
        elif isinstance(item, (dict, list, tuple)):
            pairs = list(item.items()) if isinstance(item, dict) else list(enumerate(item))
        else:
            continue
        seen.add(id(item))
        for key, child in reversed(pairs):
            stack.append((f"{here}.{key}" if here else str(key), child))


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


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)) and len(value) <= 4:
        return "(" + ", ".join(_plain(v) for v in value) + ")"
    if isinstance(value, (int, str, bool)) or value is None:
        return repr(value) if isinstance(value, str) else str(value)
    return type(value).__name__


def _optimizer_component(path: str, value: dict[str, Any]) -> Component:
    raw_state = value.get("state")
    state: dict[Any, Any] = raw_state if isinstance(raw_state, dict) else {}
    buffers = sorted({str(k) for entry in state.values() if isinstance(entry, dict) for k in entry})
    groups = value["param_groups"]
    summary = f"optimizer state: {len(groups)} param group(s), state for {len(state)} param(s)" + (
        f" ({', '.join(buffers)})" if buffers else " (empty)"
    )
    details = []
    for index, group in enumerate(groups):
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
    return Component("optimizer", path, summary, details)


def _components(root: Any) -> tuple[list[Component], dict[str, Any]]:
    """Recognise the parts of a checkpoint by shape; also collect facts for the findings."""
    comps: list[Component] = []
    facts: dict[str, Any] = {
        "cuda_tensors": False,
        "initial_lr": False,
        "scaler_slots": [],
        "rng": set(),
        "step": None,
        "epoch": None,
    }
    claimed: list[str] = []

    def inside_claimed(path: str) -> bool:
        return any(path == c or c == "" or path.startswith(c + ".") for c in claimed)

    for path, value in walk(root):
        label = path or "<root>"
        if isinstance(value, TensorInfo) and value.device.startswith("cuda"):
            facts["cuda_tensors"] = True
        if inside_claimed(path):
            continue
        leaf = path.rsplit(".", 1)[-1].lower()
        if _is_module(value):
            inner = [t for p, t in walk(value) if isinstance(t, TensorInfo)]
            params = sum(t.numel for t in inner)
            comps.append(
                Component(
                    "model",
                    label,
                    f"whole pickled module {value.label}: "
                    f"{len(inner)} tensors, {params:,} values "
                    f"({format_bytes(sum(t.nbytes for t in inner))}); loading it "
                    "imports and runs its classes' code",
                )
            )
            claimed.append(path)
        elif _is_state_dict(value):
            params = sum(t.numel for t in value.values())
            nbytes = sum(t.nbytes for t in value.values())
            comps.append(
                Component(
                    "model", label, f"model weights: {len(value)} tensors, {params:,} values ({format_bytes(nbytes)})"
                )
            )
            claimed.append(path)
        elif _is_optimizer(value):
            comp = _optimizer_component(label, value)
            comps.append(comp)
            claimed.append(path)
            if any(isinstance(g, dict) and "initial_lr" in g for g in value["param_groups"]):
                facts["initial_lr"] = True
        elif _is_scheduler(value):
            last = value.get("_last_lr")
            comps.append(
                Component(
                    "scheduler",
                    label,
                    f"LR scheduler state: last_epoch="
                    f"{_plain(value.get('last_epoch'))}" + (f", last lr={_plain(last)}" if last is not None else ""),
                )
            )
            claimed.append(path)
        elif _is_scaler(value):
            comps.append(Component("scaler", label, f"GradScaler state: scale={_plain(value.get('scale'))}"))
            claimed.append(path)
        elif "scaler" in leaf and (value is None or value == {}):
            facts["scaler_slots"].append(label)
        elif _is_data_position(value):
            comps.append(
                Component(
                    "data",
                    label,
                    "data position: epoch "
                    f"{_plain(value.get('epoch'))}, "
                    f"{_plain(value.get('batches_done'))} batches into it",
                )
            )
            claimed.append(path)
        elif _is_cpu_rng(value):
            facts["rng"].add("torch")
            comps.append(Component("rng", label, "torch CPU RNG state"))
        elif _is_cuda_rng(path, value):
            facts["rng"].add("cuda")
            comps.append(Component("rng", label, "CUDA RNG state"))
        elif _is_numpy_rng(path, value):
            facts["rng"].add("numpy")
            comps.append(Component("rng", label, "NumPy RNG state"))
            claimed.append(path)
        elif _is_python_rng(value):
            facts["rng"].add("python")
            comps.append(Component("rng", label, "Python random state"))
            claimed.append(path)
        elif leaf in ("step", "global_step", "iteration") and isinstance(value, int) and facts["step"] is None:
            facts["step"] = value
        elif leaf == "epoch" and isinstance(value, int) and facts["epoch"] is None:
            facts["epoch"] = value
    return comps, facts


def inspect_file(name: str) -> Inspection:
    """Describe the torch file ``name`` (see :func:`traindoctor.checkpoint.inspect.inspect_checkpoint`)."""
    try:
        size = os.path.getsize(name)
        with open(name, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise CheckpointReadError(f"cannot read: {exc.strerror or exc}") from None
    storages: dict[str, int] = {}
    if head.startswith(b"PK\x03\x04"):
        result, storages = _read_zip(name)
        fmt = "torch zip"
    elif head[:1] == b"\x80":
        result = _read_raw_pickle(name)
        if not result.unsafe() and result.value == _LEGACY_MAGIC:
            raise CheckpointReadError(
                "legacy (pre-1.6, non-zip) torch checkpoint: not supported by inspect; load it "
                "in a trusted environment and re-save it with torch.save"
            )
        fmt = "raw pickle (not a torch zip checkpoint)"
    elif not head:
        raise CheckpointReadError("empty file")
    else:
        raise CheckpointReadError("not a torch checkpoint (neither a zip archive nor a pickle)")
    unsafe = result.unsafe()
    tensors = [(p or "<root>", v) for p, v in walk(result.value) if isinstance(v, TensorInfo)]
    missing = sorted({t.storage_key for _, t in tensors if t.storage_key is not None and t.storage_key not in storages})
    if missing and fmt == "torch zip" and not unsafe:
        raise CheckpointReadError(
            f"corrupt checkpoint: tensor data missing from the archive (storages {', '.join(missing[:5])})"
        )
    comps, facts = _components(result.value)
    findings = resume_gaps(name, comps, facts) if fmt == "torch zip" else []
    imports = sorted({u.ref.dotted for u in unsafe if u.called})
    return Inspection(
        path=name,
        format=fmt,
        size_bytes=size,
        root=result.value,
        unsafe=unsafe,
        globals=sorted({u.ref.dotted for u in result.globals}),
        tensors=tensors,
        components=comps,
        findings=findings,
        step=facts["step"],
        epoch=facts["epoch"],
        missing_storages=missing,
        imports=imports if any(_is_module(v) for _, v in walk(result.value)) else [],
    )
