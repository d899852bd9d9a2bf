"""The inert values the pickle reader builds: descriptions of what ``pickle.load`` would make.

A global is a :class:`Global` (two strings, never imported), a call a :class:`Call` (never
called), a tensor a :class:`TensorInfo` (dtype and shape, nothing allocated). Dict keys that
Python would have to hash deeply, or that a crafted stream could make collide, are replaced by a
:class:`Label` (their bounded description) or a :class:`CallKey`; :func:`describe` writes any value
in a bounded number of characters, whatever its depth or size.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

#: Storage class stem (``FloatStorage``) -> dtype name.
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
#: The largest dimension and element count torch can hold (int64 sizes).
MAX_NUMEL = 2**63 - 1


@dataclass(frozen=True, slots=True)
class Global:
    """A ``module.name`` reference found in the stream. Never imported."""

    module: str
    name: str

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(slots=True)
class GlobalUse:
    """Where a global appears: the opcode offset, and whether the stream calls it."""

    ref: Global
    offset: int
    called: bool = False


@dataclass(slots=True)
class Call:
    """The result of calling ``func(*args)`` in the stream; recorded, never performed."""

    func: Any
    args: Any
    state: Any = None

    @property
    def label(self) -> str:
        return self.func.dotted if isinstance(self.func, Global) else "<call>"


@dataclass(frozen=True, slots=True)
class StorageRef:
    """A torch storage named by a persistent id: its archive key, dtype, device and size."""

    key: str
    dtype: str
    location: str
    numel: int


@dataclass(frozen=True, slots=True)
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


@dataclass(slots=True)
class Opaque:
    """Something the reader cannot describe (an unsupported opcode's value)."""

    what: str


@dataclass(frozen=True, slots=True)
class Label:
    """A dict key replaced by its description (hashing it would cost or collide without bound)."""

    text: str

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True, eq=False)
class CallKey:
    """A dict key built by a call (DCP's ``MetadataIndex``): hashable, its state kept readable.

    Hashed and compared by its description, so crafted keys cannot collide on purpose.
    """

    label: str
    state: tuple[tuple[Any, Any], ...]
    text: str = field(default="", compare=False)

    def get(self, name: str, default: Any = None) -> Any:
        return dict(self.state).get(name, default)

    def __hash__(self) -> int:
        return hash(self.text)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CallKey) and other.text == self.text

    def __str__(self) -> str:
        return self.text


#: Integers below this size hash to themselves: no two distinct ones collide.
_SMALL_INT = 1 << 60
_KEY_STATE_ITEMS = 16
#: Characters of a :class:`CallKey`'s description (distinct DCP index keys differ well within).
_KEY_TEXT = 1000


def key_of(key: Any) -> Any:
    """``key`` as the reader stores it in a dict: itself when hashing it is cheap and collision
    free (strings, bytes, small integers, globals), else a :class:`CallKey` or :class:`Label`."""
    if key is None or isinstance(key, (str, bytes, Global)):
        return key
    if isinstance(key, float):  # float hashes collide on purpose as easily as large integers
        return Label(repr(key))
    if isinstance(key, int):
        return key if -_SMALL_INT < key < _SMALL_INT else Label(describe(key))
    if isinstance(key, Call) and isinstance(key.state, dict) and len(key.state) <= _KEY_STATE_ITEMS:
        items = tuple((k if isinstance(k, str) else describe(k), _state_value(v)) for k, v in key.state.items())
        return CallKey(key.label, items, key.label + describe(key.state, _KEY_TEXT))
    return Label(describe(key))


def _state_value(value: Any) -> Any:
    """A :class:`CallKey`'s field: plain scalars as they are, anything else by description."""
    if value is None or isinstance(value, (str, bool, float)):
        return value
    if isinstance(value, int) and -_SMALL_INT < value < _SMALL_INT:
        return value
    return Label(describe(value))


def describe(value: Any, limit: int = 80) -> str:
    """A repr-like text of ``value`` of at most about ``limit`` characters, at any depth or size."""
    out: list[str] = []
    _describe(value, out, [limit], 0)
    text = "".join(out)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _describe(value: Any, out: list[str], budget: list[int], depth: int) -> None:
    if budget[0] <= 0:
        return
    if isinstance(value, (tuple, list, dict)):
        brackets = "()" if isinstance(value, tuple) else "[]" if isinstance(value, list) else "{}"
        if depth >= 3 or not value:
            text = brackets if not value else "…"
            out.append(text)
            budget[0] -= len(text)
            return
        opening, closing = brackets[0], brackets[1]
        out.append(opening)
        budget[0] -= 1
        items = list(itertools.islice(value.items(), 8)) if isinstance(value, dict) else value[:8]
        for index, item in enumerate(items):
            if budget[0] <= 0:
                break
            if index:
                out.append(", ")
                budget[0] -= 2
            if isinstance(value, dict):
                _describe(item[0], out, budget, depth + 1)
                out.append(": ")
                budget[0] -= 2
                _describe(item[1], out, budget, depth + 1)
            else:
                _describe(item, out, budget, depth + 1)
        if len(value) > len(items):
            out.append(", …")
        elif isinstance(value, tuple) and len(value) == 1:
            out.append(",")
        out.append(closing)
        budget[0] -= 1
        return
    text = _scalar(value, budget[0])
    out.append(text)
    budget[0] -= len(text)


def _scalar(value: Any, room: int) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return repr(value)
    if isinstance(value, int):
        return repr(value) if value.bit_length() <= 256 else f"<int of {value.bit_length()} bits>"
    if isinstance(value, (str, bytes)):
        return repr(value[: max(room, 1) + 1])
    if isinstance(value, (Label, CallKey)):
        return value.text[: max(room, 1) + 1]
    if isinstance(value, Global):
        return value.dotted[: max(room, 1) + 1]
    if isinstance(value, Call):
        return f"{value.label[: max(room, 1) + 1]}(…)"
    if isinstance(value, TensorInfo):
        return f"tensor({value.dtype}, {len(value.shape)} dims)"
    return f"<{type(value).__name__}>"
