"""A bounded fuzz run of the pickle reader, ``inspect_checkpoint`` and the DCP ``.metadata`` reader.

hypothesis mutates real streams (pickles of every protocol, a ``torch.save`` archive's
``data.pkl``, a DCP ``.metadata``) and writes opcode soups, within a fixed budget
(``derandomize``: the same examples on every run, no example database). The properties: a reader
returns a description or raises its own error with a message, never anything else (no
RecursionError, MemoryError, OverflowError ...); and whenever the reader accepts a stream, every
global that ``pickle`` itself would look up in it is among the globals the reader reports.
"""

from __future__ import annotations

import _compat_pickle
import functools
import io
import pickle
import pickletools
import tempfile
import warnings
import zipfile
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from traindoctor.checkpoint.dcp_metadata import read_metadata  # noqa: E402
from traindoctor.checkpoint.inspect import inspect_checkpoint  # noqa: E402
from traindoctor.checkpoint.inspection import CheckpointReadError  # noqa: E402
from traindoctor.checkpoint.limits import Budget, Limits  # noqa: E402
from traindoctor.checkpoint.pickle_reader import PickleError, read_pickle  # noqa: E402

#: The fixed budget: examples per property, the same on every run.
BUDGET = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
#: Small limits, so that a fuzzed stream reaches them quickly.
SMALL = Limits(opcodes=50_000, memo=2_000, depth=200, items=50_000, entries=5_000, seconds=5.0)


@functools.cache
def seeds() -> list[bytes]:
    """Real streams to mutate: plain data in every protocol, torch's data.pkl, DCP's .metadata."""
    value = {"a": [1, 2.5, "x", b"y", None, True], "b": (1, (2, (3,))), "c": {frozenset([1])}}
    out = [pickle.dumps(value, protocol=p) for p in range(6)]
    model = torch.nn.Linear(3, 2)
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "step": 3}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as archive:
        out.append(archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl"))))
    import torch.distributed.checkpoint as dcp

    with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": model.state_dict()}, checkpoint_id=folder, no_dist=True)
        out.append((Path(folder) / ".metadata").read_bytes())
    return out


_CODES = [op.code.encode("latin-1") for op in pickletools.opcodes]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A seed stream with a few bytes flipped, opcodes inserted, a slice cut or repeated."""
    data = bytearray(draw(st.sampled_from(seeds())))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "insert", "cut", "repeat"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if kind == "flip" and data:
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.sampled_from(_CODES)) + draw(st.binary(max_size=8))
        elif kind == "cut":
            del data[at : at + draw(st.integers(1, 16))]
        else:
            data[at:at] = bytes(data[at : at + draw(st.integers(1, 32))]) * draw(st.integers(1, 50))
    return bytes(data)


@st.composite
def opcode_soup(draw: st.DrawFn) -> bytes:
    """Opcodes with arbitrary argument bytes, after a PROTO of any version."""
    parts = [b"\x80" + bytes([draw(st.integers(0, 5))])]
    for _ in range(draw(st.integers(1, 60))):
        parts.append(draw(st.sampled_from(_CODES)) + draw(st.binary(max_size=6)))
    return b"".join(parts) + b"."


class _Recorder(pickle.Unpickler):
    """``pickle``'s own unpickler, recording every global it looks up and returning a dummy."""

    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self.looked_up: list[tuple[str, str]] = []

    def find_class(self, module: str, name: str) -> Any:
        self.looked_up.append((module, name))
        return _Dummy

    def persistent_load(self, pid: Any) -> Any:
        return None


class _Dummy:
    """Accepts every call, state, append and item pickle may give it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __new__(cls, *args: Any, **kwargs: Any) -> _Dummy:
        return object.__new__(cls)

    def __setstate__(self, state: Any) -> None:
        pass

    def append(self, item: Any) -> None:
        pass

    def extend(self, items: Any) -> None:
        pass

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def _what_pickle_looks_up(data: bytes) -> list[tuple[str, str]]:
    recorder = _Recorder(data)
    try:
        recorder.load()
    except Exception:  # a broken stream: what it looked up before breaking still counts
        pass
    return recorder.looked_up


def _names(module: str, name: str) -> set[tuple[str, str]]:
    """The pair as written and as ``pickle`` maps a Python 2 name."""
    mapped = _compat_pickle.NAME_MAPPING.get((module, name))
    if mapped is None:
        mapped = (_compat_pickle.IMPORT_MAPPING.get(module, module), name)
    return {(module, name), mapped}


def _check_stream(data: bytes) -> None:
    try:
        result = read_pickle(data, Budget(SMALL))
    except (PickleError, CheckpointReadError) as exc:
        assert str(exc)
        return
    ours = {(u.ref.module, u.ref.name) for u in result.globals}
    for module, name in _what_pickle_looks_up(data[: result.end]):
        assert _names(module, name) & ours, f"pickle looks up {module}.{name}; the reader saw {sorted(ours)}"


@BUDGET
@given(mutated())
def test_mutated_streams_are_described_or_refused_and_no_global_is_missed(data: bytes) -> None:
    _check_stream(data)


@BUDGET
@given(opcode_soup())
def test_opcode_soups_are_described_or_refused_and_no_global_is_missed(data: bytes) -> None:
    _check_stream(data)


@BUDGET
@given(st.one_of(mutated(), opcode_soup()))
def test_inspect_of_a_fuzzed_archive_is_a_description_or_a_read_error(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "f.pt"
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("archive/data.pkl", data)
            archive.writestr("archive/data/0", b"\x00" * 24)
        try:
            result = inspect_checkpoint(path, SMALL)
        except CheckpointReadError as exc:
            assert str(exc)
            return
        assert result.format == "torch zip"
        if not result.safe:
            assert not result.resumable


@BUDGET
@given(mutated())
def test_a_fuzzed_dcp_metadata_is_checked_or_refused(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / ".metadata").write_bytes(data)
        (Path(folder) / "__0_0.distcp").write_bytes(b"\x00" * 4096)
        try:
            read_metadata(Path(folder), Budget(SMALL))
        except CheckpointReadError as exc:
            assert str(exc)
