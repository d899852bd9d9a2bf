"""Read a pickle stream without running it.

``pickle.load`` imports every ``module.name`` the stream mentions and calls what ``REDUCE`` asks
for; that is how a crafted checkpoint runs ``os.system``. This module walks the opcodes with
:func:`pickletools.genops` and executes them on a tiny stack machine of its own whose values are
inert descriptions: a global is a :class:`Global` (a pair of strings, never imported), a call is a
:class:`Call` (never called). Only calls whose meaning is known and harmless are *interpreted*
(``OrderedDict()``, ``torch._utils._rebuild_tensor_v2(...)`` -> :class:`TensorInfo`, ...), and only
by building our own plain values from their arguments.

Every global is recorded; :func:`is_allowed` says whether it is one that
``torch.load(weights_only=True)`` would accept.
"""

from __future__ import annotations

import pickletools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

MAX_OPCODES = 50_000_000


class PickleError(ValueError):
    """The stream is not a readable pickle (corrupt, truncated, or uses unsupported opcodes)."""


@dataclass(frozen=True)
class Global:
    """A ``module.name`` reference found in the stream. Never imported."""

    module: str
    name: str

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass
class Call:
    """The result of calling ``func(*args)`` in the stream; recorded, never performed."""

    func: Any
    args: Any
    state: Any = None

    @property
    def label(self) -> str:
        return self.func.dotted if isinstance(self.func, Global) else "<call>"


@dataclass(frozen=True)
class StorageRef:
    key: str
    dtype: str
    location: str
    numel: int


@dataclass(frozen=True)
class TensorInfo:
    """A tensor described from its rebuild call: nothing is allocated or read."""

    dtype: str
    shape: tuple[int, ...]
    storage_key: str | None
    device: str
    parameter: bool = False
    kind: str = "tensor"

    @property
    def numel(self) -> int:
        total = 1
        for dim in self.shape:
            total *= dim
        return total

    @property
    def nbytes(self) -> int:
        return self.numel * ITEMSIZE.get(self.dtype, 1)


@dataclass
class Opaque:
    """Something the reader cannot describe (an unsupported opcode's value)."""

    what: str


@dataclass
class GlobalUse:
    """Where a global appears: the opcode offset, and whether the stream calls it."""

    ref: Global
    offset: int
    called: bool = False


@dataclass
class ReadResult:
    value: Any
    globals: list[GlobalUse] = field(default_factory=list)

    def unsafe(self) -> list[GlobalUse]:
        return [g for g in self.globals if not is_allowed(g.ref)]


STORAGE_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "QInt8": "qint8",
    "QUInt8": "quint8",
    "QInt32": "qint32",
    "QUInt4x2": "quint4x2",
    "QUInt2x4": "quint2x4",
    "Untyped": "uint8",
}
ITEMSIZE = {
    "float64": 8,
    "int64": 8,
    "complex64": 8,
    "complex128": 16,
    "uint64": 8,
    "float32": 4,
    "int32": 4,
    "qint32": 4,
    "uint32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int16": 2,
    "uint16": 2,
}

_REBUILD_TENSOR = {"_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3"}
_ALLOWED_EXACT = {
    "collections.OrderedDict",
    "collections.Counter",
    "builtins.set",
    "builtins.frozenset",
    "builtins.bytearray",
    "builtins.complex",
    "_codecs.encode",
    "torch.Size",
    "torch.device",
    "torch.Tensor",
    "torch.nn.parameter.Parameter",
    "torch.serialization._get_layout",
    "torch.storage.TypedStorage",
    "torch.storage.UntypedStorage",
    "torch._tensor._rebuild_from_type_v2",
}
_ALLOWED_REBUILD = re.compile(
    r"torch\._utils\._rebuild_(tensor(_v[23])?|parameter(_with_state)?|qtensor|sparse_tensor|"
    r"nested_tensor|meta_tensor_no_storage|wrapper_subclass|device_tensor_from_cpu_tensor)\Z"
)
_ALLOWED_TORCH_CLASS = re.compile(r"torch(\.cuda)?(\.sparse)?\.[A-Z][A-Za-z0-9]*(Storage|Tensor)\Z")
_ALLOWED_TORCH_CONST = re.compile(
    r"torch\.(b?float\d+(_[a-z0-9]+)?|u?int\d+|bool|complex\d+|bits\w+|q?u?int\w+|per_\w+|"
    r"strided|sparse_(coo|csr|csc|bsr|bsc)|_mkldnn|contiguous_format|channels_last(_3d)?|"
    r"preserve_format)\Z"
)


def is_allowed(ref: Global) -> bool:
    """True for globals that torch's ``weights_only`` unpickler accepts (tensors and plain data)."""
    dotted = ref.dotted
    return bool(
        dotted in _ALLOWED_EXACT
        or _ALLOWED_REBUILD.match(dotted)
        or _ALLOWED_TORCH_CLASS.match(dotted)
        or _ALLOWED_TORCH_CONST.match(dotted)
    )


def _storage_dtype(storage_type: Any) -> str:
    if isinstance(storage_type, Global) and storage_type.name.endswith("Storage"):
        return STORAGE_DTYPES.get(storage_type.name[: -len("Storage")], storage_type.name)
    if isinstance(storage_type, str):
        return storage_type
    return "unknown"


def _dims(value: Any) -> tuple[int, ...] | None:
    if isinstance(value, Call) and value.label == "torch.Size" and value.args:
        value = value.args[0]
    if isinstance(value, (tuple, list)) and all(isinstance(d, int) for d in value):
        return tuple(value)
    return None


def _interpret_call(func: Any, args: Any) -> Any:
    """Plain values for the harmless calls we understand; a :class:`Call` for all others."""
    if not isinstance(func, Global) or not isinstance(args, tuple) or not is_allowed(func):
        return Call(func, args)
    dotted = func.dotted
    if dotted in ("collections.OrderedDict", "collections.Counter") and not args:
        return {}
    if dotted in ("builtins.set", "builtins.frozenset") and len(args) == 1 and isinstance(args[0], list):
        return list(args[0])
    if dotted == "_codecs.encode" and len(args) == 2 and isinstance(args[0], str) and args[1] in ("latin1", "latin-1"):
        return args[0].encode("latin1")
    if dotted == "builtins.bytearray" and len(args) == 1 and isinstance(args[0], bytes):
        return args[0]
    if dotted == "torch.device" and args and all(isinstance(a, (str, int)) for a in args):
        return ":".join(str(a) for a in args)
    if dotted == "torch.Size" and len(args) == 1 and _dims(args[0]) is not None:
        return tuple(args[0])
    if func.module == "torch._utils" and func.name in _REBUILD_TENSOR and len(args) >= 4:
        storage, shape = args[0], _dims(args[2])
        dtype = storage.dtype if isinstance(storage, StorageRef) else "unknown"
        if func.name == "_rebuild_tensor_v3" and len(args) >= 7:
            dtype = _dtype_name(args[6]) or dtype
        if shape is not None:
            return TensorInfo(
                dtype=dtype,
                shape=shape,
                storage_key=storage.key if isinstance(storage, StorageRef) else None,
                device=storage.location if isinstance(storage, StorageRef) else "?",
            )
    if (
        func.module == "torch._utils"
        and func.name.startswith("_rebuild_parameter")
        and args
        and isinstance(args[0], TensorInfo)
    ):
        t = args[0]
        return TensorInfo(t.dtype, t.shape, t.storage_key, t.device, parameter=True, kind=t.kind)
    if dotted == "torch._tensor._rebuild_from_type_v2" and len(args) >= 3 and isinstance(args[2], tuple):
        return _interpret_call(args[0], args[2])
    if (
        func.module == "torch._utils"
        and func.name == "_rebuild_device_tensor_from_cpu_tensor"
        and args
        and isinstance(args[0], TensorInfo)
    ):
        t = args[0]
        device = args[2] if len(args) > 2 and isinstance(args[2], str) else t.device
        return TensorInfo(t.dtype, t.shape, t.storage_key, device, t.parameter, t.kind)
    if func.module == "torch._utils" and func.name.startswith("_rebuild_"):
        return TensorInfo(dtype="?", shape=(), storage_key=None, device="?", kind=func.name[len("_rebuild_") :])
    if func.module == "torch" and _ALLOWED_TORCH_CONST.match(dotted):
        return Call(func, args)
    return Call(func, args)


def _dtype_name(value: Any) -> str | None:
    if isinstance(value, Global) and value.module == "torch":
        return value.name
    return None


def _persistent(pid: Any) -> Any:
    if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage":
        _, storage_type, key, location, numel = pid[:5]
        if isinstance(numel, int):
            return StorageRef(key=str(key), dtype=_storage_dtype(storage_type), location=str(location), numel=numel)
    return Opaque(f"persistent id {pid!r}"[:80])


_CONSTANT_OPS = {
    "INT",
    "BININT",
    "BININT1",
    "BININT2",
    "LONG",
    "LONG1",
    "LONG4",
    "FLOAT",
    "BINFLOAT",
    "STRING",
    "BINSTRING",
    "SHORT_BINSTRING",
    "UNICODE",
    "BINUNICODE",
    "SHORT_BINUNICODE",
    "BINUNICODE8",
    "BINBYTES",
    "SHORT_BINBYTES",
    "BINBYTES8",
    "BYTEARRAY8",
}


def _opcodes(data: bytes) -> Iterator[tuple[str, Any, int]]:
    """``pickletools.genops`` over ``data``: (opcode name, argument, offset). The argument is what
    the opcode carries (an int for PUT/GET, a str for GLOBAL, ...; None for none); reading bytes,
    a seekable stream, every offset is known."""
    for op, arg, pos in pickletools.genops(data):
        yield op.name, arg, cast(int, pos)


def read_pickle(data: bytes) -> ReadResult:
    """Run our inert stack machine over one pickle; the first STOP ends it."""
    stack: list[Any] = []
    marks: list[list[Any]] = []
    memo: dict[int, Any] = {}
    uses: list[GlobalUse] = []
    last_global: dict[int, GlobalUse] = {}

    def pop_mark() -> list[Any]:
        nonlocal stack
        items = stack
        stack = marks.pop()
        return items

    def note_call(func: Any) -> None:
        use = last_global.get(id(func))
        if use is not None:
            use.called = True

    try:
        for count, (name, arg, pos) in enumerate(_opcodes(data)):
            if count > MAX_OPCODES:
                raise PickleError("pickle stream too long")
            if name in _CONSTANT_OPS:
                stack.append(arg)
            elif name in ("PROTO", "FRAME"):
                continue
            elif name == "STOP":
                return ReadResult(stack.pop(), uses)
            elif name == "MARK":
                marks.append(stack)
                stack = []
            elif name == "NONE":
                stack.append(None)
            elif name in ("NEWTRUE", "NEWFALSE"):
                stack.append(name == "NEWTRUE")
            elif name == "EMPTY_DICT":
                stack.append({})
            elif name in ("EMPTY_LIST", "EMPTY_SET"):
                stack.append([])
            elif name == "EMPTY_TUPLE":
                stack.append(())
            elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
                n = int(name[-1])
                top = tuple(stack[-n:])
                del stack[-n:]
                if len(top) != n:
                    raise PickleError("stack underflow")
                stack.append(top)
            elif name == "TUPLE":
                items = pop_mark()  # before touching ``stack``: pop_mark rebinds it
                stack.append(tuple(items))
            elif name in ("LIST", "FROZENSET"):
                items = pop_mark()
                stack.append(list(items))
            elif name == "DICT":
                items = pop_mark()
                stack.append({_key(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)})
            elif name == "APPEND":
                value = stack.pop()
                _append(stack[-1], [value])
            elif name in ("APPENDS", "ADDITEMS"):
                items = pop_mark()
                _append(stack[-1], items)
            elif name == "SETITEM":
                value, key = stack.pop(), stack.pop()
                _setitems(stack[-1], [key, value])
            elif name == "SETITEMS":
                items = pop_mark()
                _setitems(stack[-1], items)
            elif name == "POP":
                stack.pop()
            elif name == "POP_MARK":
                pop_mark()
            elif name == "DUP":
                stack.append(stack[-1])
            elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
                memo[int(arg)] = stack[-1]
            elif name == "MEMOIZE":
                memo[len(memo)] = stack[-1]
            elif name in ("GET", "BINGET", "LONG_BINGET"):
                if int(arg) not in memo:
                    raise PickleError(f"memo key {arg} missing")
                stack.append(memo[int(arg)])
            elif name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                ref = Global(module, attr)
                use = GlobalUse(ref, pos, called=name == "INST")
                uses.append(use)
                if name == "INST":
                    items = pop_mark()
                    stack.append(Call(ref, tuple(items)))
                else:
                    last_global[id(ref)] = use
                    stack.append(ref)
            elif name == "STACK_GLOBAL":
                attr, module = stack.pop(), stack.pop()
                ref = Global(str(module), str(attr))
                use = GlobalUse(ref, pos)
                uses.append(use)
                last_global[id(ref)] = use
                stack.append(ref)
            elif name == "REDUCE":
                args, func = stack.pop(), stack.pop()
                note_call(func)
                stack.append(_interpret_call(func, args))
            elif name in ("NEWOBJ", "NEWOBJ_EX"):
                if name == "NEWOBJ_EX":
                    stack.pop()
                args, cls = stack.pop(), stack.pop()
                note_call(cls)
                stack.append(Call(cls, args))
            elif name == "OBJ":
                items = pop_mark()
                if not items:
                    raise PickleError("OBJ without class")
                note_call(items[0])
                stack.append(Call(items[0], tuple(items[1:])))
            elif name == "BUILD":
                state = stack.pop()
                target = stack[-1]
                if isinstance(target, Call):
                    target.state = state
                    note_call(target.func)
            elif name == "PERSID":
                stack.append(_persistent(arg))
            elif name == "BINPERSID":
                stack.append(_persistent(stack.pop()))
            elif name in ("EXT1", "EXT2", "EXT4"):
                uses.append(GlobalUse(Global("copyreg", f"extension[{arg}]"), pos, called=True))
                stack.append(Opaque(f"extension code {arg}"))
            elif name in ("NEXT_BUFFER", "READONLY_BUFFER"):
                stack.append(Opaque("out-of-band buffer"))
            else:
                raise PickleError(f"unsupported pickle opcode {name}")
    except PickleError:
        raise
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise PickleError(f"corrupt pickle stream: {exc}") from None
    raise PickleError("pickle stream ends without STOP (truncated)")


@dataclass(frozen=True)
class CallKey:
    """A dict key built by a call (DCP's ``MetadataIndex``): hashable, its state kept readable."""

    label: str
    state: tuple[tuple[Any, Any], ...]

    def get(self, name: str, default: Any = None) -> Any:
        return dict(self.state).get(name, default)


def _key(key: Any, _depth: int = 0) -> Any:
    try:
        hash(key)
        return key
    except TypeError:
        pass
    if isinstance(key, Call) and _depth < 4:
        state = key.state
        if isinstance(state, dict):
            items = tuple((str(k), _key(v, _depth + 1)) for k, v in state.items())
        else:
            items = (("args", _key(key.args, _depth + 1)),)
        try:
            hash(items)
            return CallKey(key.label, items)
        except TypeError:
            pass
    if isinstance(key, (list, tuple)) and _depth < 4:
        items = tuple(_key(v, _depth + 1) for v in key)
        try:
            hash(items)
            return items
        except TypeError:
            pass
    return repr(key)[:60]


def _append(target: Any, items: list[Any]) -> None:
    if isinstance(target, list):
        target.extend(items)
    elif isinstance(target, Call):
        target.state = ("appends", items)


def _setitems(target: Any, items: list[Any]) -> None:
    if isinstance(target, dict):
        for i in range(0, len(items) - 1, 2):
            target[_key(items[i])] = items[i + 1]
    elif isinstance(target, Call):
        target.state = ("setitems", items)
