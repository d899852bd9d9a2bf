"""Read a pickle stream without running it, within limits.

``pickle.load`` imports every ``module.name`` the stream mentions and calls what ``REDUCE`` asks
for; that is how a crafted checkpoint runs ``os.system``. This module walks the opcodes with
:func:`pickletools.genops` (every protocol, 0 to 5) and executes them on a tiny stack machine of
its own whose values are inert descriptions (:mod:`traindoctor.checkpoint.pickle_values`): a
global is a :class:`Global` (a pair of strings, never imported), a call is a :class:`Call` (never
called). Only calls whose meaning is known and harmless are *interpreted* (``OrderedDict()``,
``torch._utils._rebuild_tensor_v2(...)`` -> :class:`TensorInfo`, ...), and only by building our
own plain values from their arguments.

Every global is recorded, with the name ``pickle`` would look up (protocol 0-2 names are mapped
as ``pickle`` maps them); :func:`~traindoctor.checkpoint.allowlist.is_allowed` says whether
``torch.load(weights_only=True)`` would accept it. The work is bounded by a
:class:`~traindoctor.checkpoint.limits.Budget`: opcodes, memo entries, integer sizes, global
references and time; a stream that goes past one is refused with :class:`LimitExceeded`.
"""

from __future__ import annotations

import _compat_pickle
import io
import pickletools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from traindoctor.checkpoint.allowlist import is_allowed
from traindoctor.checkpoint.limits import Budget, LimitExceeded
from traindoctor.checkpoint.pickle_values import (
    MAX_NUMEL,
    STORAGE_DTYPES,
    Call,
    CallKey,
    Global,
    GlobalUse,
    Opaque,
    StorageRef,
    TensorInfo,
    describe,
    key_of,
)

__all__ = [
    "Call",
    "CallKey",
    "Global",
    "GlobalUse",
    "Opaque",
    "PickleError",
    "ReadResult",
    "StorageRef",
    "TensorInfo",
    "read_pickle",
]


class PickleError(ValueError):
    """The stream is not a readable pickle (corrupt, truncated, or uses unsupported opcodes).

    ``globals`` lists the globals met before the stream broke off: ``pickle.load`` would have
    imported (and maybe called) them before failing.
    """

    def __init__(self, message: str, uses: list[GlobalUse] | None = None) -> None:
        super().__init__(message)
        self.globals: list[GlobalUse] = uses or []


@dataclass
class ReadResult:
    """One pickle read: its value (inert), the globals it names, and where its STOP ended."""

    value: Any
    globals: list[GlobalUse] = field(default_factory=list)
    end: int = 0
    protocol: int = 0
    #: Values that Python hashes deterministically and a crafted stream can make collide, so
    #: that building its dicts and sets takes quadratic time in ``pickle``: integers of more
    #: than 60 bits anywhere, float dict keys and set members.
    collidable: int = 0

    def unsafe(self) -> list[GlobalUse]:
        return [g for g in self.globals if not is_allowed(g.ref)]


_REBUILD_TENSOR = {"_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3"}


def _storage_dtype(storage_type: Any) -> str:
    if isinstance(storage_type, Global) and storage_type.name.endswith("Storage"):
        return STORAGE_DTYPES.get(storage_type.name[: -len("Storage")], storage_type.name)
    if isinstance(storage_type, str):
        return storage_type[:40]
    return "unknown"


def _dims(value: Any) -> tuple[int, ...] | None:
    """A tensor shape, or None where ``value`` is not one torch could hold."""
    if isinstance(value, Call) and value.label == "torch.Size" and value.args:
        value = value.args[0]
    if not isinstance(value, (tuple, list)) or len(value) > 64:
        return None
    total = 1
    for dim in value:
        if not isinstance(dim, int) or isinstance(dim, bool) or not 0 <= dim <= MAX_NUMEL:
            return None
        total *= dim
        if total > MAX_NUMEL:
            return None
    return tuple(value)


def _interpret_call(func: Any, args: Any) -> Any:
    """Plain values for the harmless calls we understand; a :class:`Call` for all others."""
    if not isinstance(func, Global) or not isinstance(args, tuple) or not is_allowed(func):
        return Call(func, args)
    dotted = func.dotted
    if dotted in ("collections.OrderedDict", "collections.Counter") and not args:
        return {}
    if dotted in ("builtins.set", "builtins.frozenset") and len(args) == 1 and isinstance(args[0], list):
        return args[0]
    if dotted == "_codecs.encode" and len(args) == 2 and isinstance(args[0], str) and args[1] in ("latin1", "latin-1"):
        try:
            return args[0].encode("latin1")
        except UnicodeEncodeError:
            return Call(func, args)
    if dotted == "builtins.bytearray" and len(args) == 1 and isinstance(args[0], bytes):
        return args[0]
    if dotted == "torch.device" and args and len(args) <= 2 and all(isinstance(a, (str, int)) for a in args):
        return ":".join(a[:40] if isinstance(a, str) else describe(a) for a in args)
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
        device = args[2][:40] if len(args) > 2 and isinstance(args[2], str) else t.device
        return TensorInfo(t.dtype, t.shape, t.storage_key, device, t.parameter, t.kind)
    if func.module == "torch._utils" and func.name.startswith("_rebuild_"):
        return TensorInfo(dtype="?", shape=(), storage_key=None, device="?", kind=func.name[len("_rebuild_") :])
    return Call(func, args)


def _dtype_name(value: Any) -> str | None:
    if isinstance(value, Global) and value.module == "torch":
        return value.name
    return None


def _persistent(pid: Any) -> Any:
    if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage":
        _, storage_type, key, location, numel = pid[:5]
        if isinstance(numel, int) and 0 <= numel <= MAX_NUMEL:
            return StorageRef(
                key=key[:200] if isinstance(key, str) else describe(key),
                dtype=_storage_dtype(storage_type),
                location=location[:40] if isinstance(location, str) else describe(location),
                numel=numel,
            )
    return Opaque(f"persistent id {describe(pid)}"[:80])


_CONSTANT_OPS = (
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
)
_INT_OPS = {"INT", "LONG", "LONG1", "LONG4"}
#: Every opcode ``pickletools`` knows (protocols 0-5), by its one-byte code.
_OPCODES = {op.code.encode("latin-1"): op for op in pickletools.opcodes}
#: Integers up to this size hash to themselves: no two distinct ones collide.
_COLLISION_FREE_BITS = 60
_SETS = ("builtins.set", "builtins.frozenset")
#: Opcodes between two clock checks.
_CLOCK_EVERY = 1 << 14


class _Machine:
    """The inert stack machine: one method per opcode, values from ``pickle_values``."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.limits = budget.limits
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.uses: list[GlobalUse] = []
        self.last_global: dict[int, GlobalUse] = {}
        self.protocol = 0
        self.collidable = 0
        self.done = False
        self.value: Any = None
        self.ops: dict[str, Callable[[Any, int], None]] = {name: self.constant for name in _CONSTANT_OPS}
        for name in _INT_OPS:
            self.ops[name] = self.integer
        for name, method in {
            "PROTO": self.proto,
            "FRAME": self.nothing,
            "STOP": self.stop,
            "MARK": self.mark,
            "NONE": self.none,
            "NEWTRUE": self.true,
            "NEWFALSE": self.false,
            "EMPTY_DICT": self.empty_dict,
            "EMPTY_LIST": self.empty_list,
            "EMPTY_SET": self.empty_list,
            "EMPTY_TUPLE": self.empty_tuple,
            "TUPLE1": self.tuple1,
            "TUPLE2": self.tuple2,
            "TUPLE3": self.tuple3,
            "TUPLE": self.tuple_mark,
            "LIST": self.list_mark,
            "FROZENSET": self.list_mark,
            "DICT": self.dict_mark,
            "APPEND": self.append,
            "APPENDS": self.appends,
            "ADDITEMS": self.additems,
            "SETITEM": self.setitem,
            "SETITEMS": self.setitems,
            "POP": self.pop,
            "POP_MARK": self.pop_mark_op,
            "DUP": self.dup,
            "PUT": self.put,
            "BINPUT": self.put,
            "LONG_BINPUT": self.put,
            "MEMOIZE": self.memoize,
            "GET": self.get,
            "BINGET": self.get,
            "LONG_BINGET": self.get,
            "GLOBAL": self.global_op,
            "INST": self.inst,
            "STACK_GLOBAL": self.stack_global,
            "REDUCE": self.reduce,
            "NEWOBJ": self.newobj,
            "NEWOBJ_EX": self.newobj_ex,
            "OBJ": self.obj,
            "BUILD": self.build,
            "PERSID": self.persid,
            "BINPERSID": self.binpersid,
            "EXT1": self.ext,
            "EXT2": self.ext,
            "EXT4": self.ext,
            "NEXT_BUFFER": self.buffer,
            "READONLY_BUFFER": self.buffer,
        }.items():
            self.ops[name] = method

    # -- helpers

    def pop_mark(self) -> list[Any]:
        items = self.stack
        self.stack = self.marks.pop()
        return items

    def note_call(self, func: Any) -> None:
        use = self.last_global.get(id(func))
        if use is not None:
            use.called = True

    def add_global(self, ref: Global, pos: int, called: bool) -> GlobalUse:
        self.budget.spend_entries("global references")
        use = GlobalUse(ref, pos, called)
        self.uses.append(use)
        return use

    # -- opcodes (argument, offset)

    def constant(self, arg: Any, pos: int) -> None:
        self.stack.append(arg)

    def integer(self, arg: Any, pos: int) -> None:
        if isinstance(arg, int):
            bits = arg.bit_length()
            if bits > self.limits.int_bits:
                raise LimitExceeded(f"pickle holds an integer of {bits} bits", "int_bits", self.limits.int_bits)
            self.collidable += bits > _COLLISION_FREE_BITS
        self.stack.append(arg)

    def count_floats(self, values: list[Any]) -> None:
        """Float dict keys and set members: their hashes can be made to collide."""
        self.collidable += sum(1 for v in values if isinstance(v, float))

    def proto(self, arg: Any, pos: int) -> None:
        self.protocol = int(arg)

    def nothing(self, arg: Any, pos: int) -> None:
        pass

    def stop(self, arg: Any, pos: int) -> None:
        self.value = self.stack.pop()
        self.done = True

    def mark(self, arg: Any, pos: int) -> None:
        self.marks.append(self.stack)
        self.stack = []

    def none(self, arg: Any, pos: int) -> None:
        self.stack.append(None)

    def true(self, arg: Any, pos: int) -> None:
        self.stack.append(True)

    def false(self, arg: Any, pos: int) -> None:
        self.stack.append(False)

    def empty_dict(self, arg: Any, pos: int) -> None:
        self.stack.append({})

    def empty_list(self, arg: Any, pos: int) -> None:
        self.stack.append([])

    def empty_tuple(self, arg: Any, pos: int) -> None:
        self.stack.append(())

    def tuple1(self, arg: Any, pos: int) -> None:
        self.tuple_n(1)

    def tuple2(self, arg: Any, pos: int) -> None:
        self.tuple_n(2)

    def tuple3(self, arg: Any, pos: int) -> None:
        self.tuple_n(3)

    def tuple_n(self, n: int) -> None:
        if len(self.stack) < n:
            raise PickleError("stack underflow")
        top = tuple(self.stack[-n:])
        del self.stack[-n:]
        self.stack.append(top)

    def tuple_mark(self, arg: Any, pos: int) -> None:
        items = self.pop_mark()  # before touching ``stack``: pop_mark rebinds it
        self.stack.append(tuple(items))

    def list_mark(self, arg: Any, pos: int) -> None:
        items = self.pop_mark()  # before touching ``stack``: pop_mark rebinds it
        self.stack.append(items)

    def dict_mark(self, arg: Any, pos: int) -> None:
        items = self.pop_mark()
        self.count_floats(items[0::2])
        self.stack.append({key_of(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)})

    def append(self, arg: Any, pos: int) -> None:
        value = self.stack.pop()
        _append(self.stack[-1], [value])

    def appends(self, arg: Any, pos: int) -> None:
        items = self.pop_mark()
        _append(self.stack[-1], items)

    def additems(self, arg: Any, pos: int) -> None:
        items = self.pop_mark()
        self.count_floats(items)
        _append(self.stack[-1], items)

    def setitem(self, arg: Any, pos: int) -> None:
        value, key = self.stack.pop(), self.stack.pop()
        self.count_floats([key])
        _setitems(self.stack[-1], [key, value])

    def setitems(self, arg: Any, pos: int) -> None:
        items = self.pop_mark()
        self.count_floats(items[0::2])
        _setitems(self.stack[-1], items)

    def pop(self, arg: Any, pos: int) -> None:
        if self.stack:
            self.stack.pop()
        else:
            self.pop_mark()

    def pop_mark_op(self, arg: Any, pos: int) -> None:
        self.pop_mark()

    def dup(self, arg: Any, pos: int) -> None:
        self.stack.append(self.stack[-1])

    def put(self, arg: Any, pos: int) -> None:
        self.remember(int(arg))

    def memoize(self, arg: Any, pos: int) -> None:
        self.remember(len(self.memo))

    def remember(self, index: int) -> None:
        if index not in self.memo and len(self.memo) >= self.limits.memo:
            raise LimitExceeded(f"pickle memo holds more than {self.limits.memo} entries", "memo", self.limits.memo)
        self.memo[index] = self.stack[-1]

    def get(self, arg: Any, pos: int) -> None:
        index = int(arg)
        if index not in self.memo:
            raise PickleError(f"memo key {describe(arg)} missing")
        self.stack.append(self.memo[index])

    def resolve(self, module: str, name: str) -> Global:
        """The global ``pickle`` would look up for a GLOBAL/INST line (protocol 0-2 names mapped)."""
        if self.protocol < 3:
            if (module, name) in _compat_pickle.NAME_MAPPING:
                module, name = _compat_pickle.NAME_MAPPING[(module, name)]
            elif module in _compat_pickle.IMPORT_MAPPING:
                module = _compat_pickle.IMPORT_MAPPING[module]
        return Global(module, name)

    def global_op(self, arg: Any, pos: int) -> None:
        module, _, attr = str(arg).partition(" ")
        ref = self.resolve(module, attr)
        self.last_global[id(ref)] = self.add_global(ref, pos, called=False)
        self.stack.append(ref)

    def inst(self, arg: Any, pos: int) -> None:
        module, _, attr = str(arg).partition(" ")
        ref = self.resolve(module, attr)
        self.add_global(ref, pos, called=True)
        items = self.pop_mark()
        self.stack.append(Call(ref, tuple(items)))

    def stack_global(self, arg: Any, pos: int) -> None:
        attr, module = self.stack.pop(), self.stack.pop()
        if not isinstance(attr, str) or not isinstance(module, str):
            raise PickleError("STACK_GLOBAL without two strings")
        ref = Global(module, attr)
        self.last_global[id(ref)] = self.add_global(ref, pos, called=False)
        self.stack.append(ref)

    def reduce(self, arg: Any, pos: int) -> None:
        args, func = self.stack.pop(), self.stack.pop()
        self.note_call(func)
        if isinstance(func, Global) and func.dotted in _SETS and isinstance(args, tuple) and args:
            self.count_floats(args[0] if isinstance(args[0], list) else [])
        self.stack.append(_interpret_call(func, args))

    def newobj(self, arg: Any, pos: int) -> None:
        args, cls = self.stack.pop(), self.stack.pop()
        self.note_call(cls)
        self.stack.append(Call(cls, args))

    def newobj_ex(self, arg: Any, pos: int) -> None:
        self.stack.pop()
        self.newobj(arg, pos)

    def obj(self, arg: Any, pos: int) -> None:
        items = self.pop_mark()
        if not items:
            raise PickleError("OBJ without class")
        self.note_call(items[0])
        self.stack.append(Call(items[0], tuple(items[1:])))

    def build(self, arg: Any, pos: int) -> None:
        state = self.stack.pop()
        target = self.stack[-1]
        if isinstance(target, Global):
            raise PickleError(
                f"BUILD applied to the global {target.dotted} itself (pickle.load would set its attributes)"
            )
        if isinstance(target, Call):
            target.state = state
            self.note_call(target.func)

    def persid(self, arg: Any, pos: int) -> None:
        self.stack.append(_persistent(arg))

    def binpersid(self, arg: Any, pos: int) -> None:
        self.stack.append(_persistent(self.stack.pop()))

    def ext(self, arg: Any, pos: int) -> None:
        self.add_global(Global("copyreg", f"extension[{describe(arg)}]"), pos, called=True)
        self.stack.append(Opaque(f"extension code {describe(arg)}"))

    def buffer(self, arg: Any, pos: int) -> None:
        self.stack.append(Opaque("out-of-band buffer"))

    # -- the loop

    def run(self, data: bytes, start: int) -> int:
        """Execute from ``start`` to the first STOP; return the offset just past it."""
        stream = io.BytesIO(data)
        stream.seek(start)
        read, tell = stream.read, stream.tell
        table = {code: (op.arg.reader if op.arg else None, self.ops.get(op.name)) for code, op in _OPCODES.items()}
        budget, limit = self.budget, self.limits.opcodes
        while True:
            pos = tell()
            code = read(1)
            entry = table.get(code)
            if entry is None:
                if not code:
                    raise PickleError("pickle stream ends without STOP (truncated)")
                raise PickleError(f"unknown pickle opcode {code!r} at offset {pos}")
            reader, method = entry
            if method is None:
                raise PickleError(f"unsupported pickle opcode {_OPCODES[code].name}")
            budget.opcodes += 1
            if budget.opcodes > limit:
                raise LimitExceeded(f"pickle runs more than {limit} opcodes", "opcodes", limit)
            if not budget.opcodes % _CLOCK_EVERY:
                budget.check_time()
            method(reader(stream) if reader is not None else None, pos)
            if self.done:
                return tell()


def read_pickle(data: bytes, budget: Budget | None = None, start: int = 0) -> ReadResult:
    """Run our inert stack machine over the pickle at ``data[start:]``; the first STOP ends it.

    Raises :class:`PickleError` for a stream that is not a readable pickle (its ``globals`` are
    those met before it broke off) and :class:`LimitExceeded` when ``budget`` runs out.
    """
    machine = _Machine(budget or Budget())
    try:
        end = machine.run(data, start)
    except (PickleError, LimitExceeded) as exc:
        if isinstance(exc, PickleError):
            exc.globals = machine.uses
        raise
    except KeyError:
        raise PickleError("corrupt pickle stream: a missing key", machine.uses) from None
    except (ValueError, IndexError, TypeError, AttributeError, EOFError) as exc:
        raise PickleError(f"corrupt pickle stream: {str(exc)[:200]}", machine.uses) from None
    return ReadResult(machine.value, machine.uses, end, machine.protocol, machine.collidable)


def _append(target: Any, items: list[Any]) -> None:
    if isinstance(target, list):
        target.extend(items)
    elif isinstance(target, Call):
        target.state = ("appends", items)


def _setitems(target: Any, items: list[Any]) -> None:
    if isinstance(target, dict):
        for i in range(0, len(items) - 1, 2):
            target[key_of(items[i])] = items[i + 1]
    elif isinstance(target, Call):
        target.state = ("setitems", items)
