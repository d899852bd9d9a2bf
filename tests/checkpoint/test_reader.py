"""The safe pickle reader: torch's weights_only allowlist semantics, every protocol, limits as verdicts."""

from __future__ import annotations

import os
import pickle
import struct

import pytest

from traindoctor.checkpoint.allowlist import dcp_metadata_allowed, is_allowed
from traindoctor.checkpoint.cli import main
from traindoctor.checkpoint.inspect import LimitExceeded, Limits, inspect_checkpoint
from traindoctor.checkpoint.limits import Budget, parse_limit
from traindoctor.checkpoint.pickle_reader import Global, read_pickle

torch = pytest.importorskip("torch")


def _s(text: str) -> bytes:
    data = text.encode()
    return b"X" + struct.pack("<I", len(data)) + data


@pytest.mark.parametrize(
    ("module", "name", "allowed"),
    [
        ("torch._utils", "_rebuild_tensor_v2", True),
        ("collections", "OrderedDict", True),
        ("torch", "float32", True),
        ("torch", "FloatStorage", True),
        # a dotted name is looked up attribute by attribute: never an exact pair
        ("torch.distributed.checkpoint.filesystem", "os.system", False),
        ("torch", "os.system", False),
        ("collections", "OrderedDict.__reduce__", False),
        ("torch.storage", "_load_from_bytes", False),
        ("os", "system", False),
        ("posix", "system", False),
        ("builtins", "eval", False),
    ],
)
def test_the_allowlist_matches_exact_module_name_pairs(module: str, name: str, allowed: bool) -> None:
    assert is_allowed(Global(module, name)) is allowed


def test_dcp_metadata_classes_are_exact_too() -> None:
    assert dcp_metadata_allowed(Global("torch.distributed.checkpoint.metadata", "Metadata"))
    assert not dcp_metadata_allowed(Global("torch.distributed.checkpoint.filesystem", "os.system"))
    assert not dcp_metadata_allowed(Global("torch.distributed.checkpoint.metadata", "dataclasses.field"))
    assert not dcp_metadata_allowed(Global("torch._utils", "_rebuild_tensor_v2"))  # pickle.load would call it


class _System:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, ("true",)


@pytest.mark.parametrize("protocol", range(6))
def test_every_protocol_names_the_called_global(protocol: int) -> None:
    result = read_pickle(pickle.dumps({"x": _System()}, protocol=protocol))
    assert [(u.ref.dotted, u.called) for u in result.unsafe()] == [(f"{os.system.__module__}.system", True)]


def test_protocol_0_names_are_mapped_as_pickle_maps_them() -> None:
    result = read_pickle(b"c__builtin__\neval\n(S'1'\ntR.")
    assert [u.ref.dotted for u in result.unsafe()] == ["builtins.eval"]


def test_a_dotted_stack_global_is_reported_as_itself(tmp_path, capsys) -> None:
    data = b"\x80\x04" + _s("torch.distributed.checkpoint.filesystem") + _s("os.system") + b"\x93(" + _s("true")
    (tmp_path / "d.pkl").write_bytes(data + b"tR.")
    assert main(["inspect", str(tmp_path / "d.pkl")]) == 1
    out = capsys.readouterr().out
    assert "torch.distributed.checkpoint.filesystem.os.system  (called, pickle offset" in out
    assert "a dotted name: pickle looks it up attribute by attribute" in out
    assert "UNSAFE" in out


@pytest.mark.parametrize("value", [{}, None, {"a": 1}, {"model": {}}, [1, 2]])
def test_a_checkpoint_without_model_and_optimizer_state_is_not_resumable(tmp_path, capsys, value) -> None:
    torch.save(value, tmp_path / "e.pt")
    assert main(["inspect", str(tmp_path / "e.pt")]) == 1
    out = capsys.readouterr().out
    assert "resumable: model" not in out
    assert "not resumable: no model or optimizer state found" in out or "not fully resumable" in out
    assert inspect_checkpoint(tmp_path / "e.pt").resumable is False


def test_model_weights_alone_are_not_resumable(tmp_path, capsys) -> None:
    torch.save({"model": torch.nn.Linear(2, 2).state_dict()}, tmp_path / "m.pt")
    result = inspect_checkpoint(tmp_path / "m.pt")
    assert result.safe and not result.resumable
    assert main(["inspect", str(tmp_path / "m.pt"), "--output-format", "json"]) == 1
    assert '"resumable": false' in capsys.readouterr().out


def test_a_limit_is_a_verdict_naming_it_and_configurable(tmp_path, capsys) -> None:
    nested = b"\x80\x02)" + b"\x85" * 50 + b"."
    (tmp_path / "n.pkl").write_bytes(nested)
    with pytest.raises(LimitExceeded, match=r"^refused: pickle nests deeper than 20 levels \(limit depth=20\)$"):
        inspect_checkpoint(tmp_path / "n.pkl", Limits(depth=20))
    assert inspect_checkpoint(tmp_path / "n.pkl", Limits(depth=100)).root is not None
    assert main(["inspect", str(tmp_path / "n.pkl"), "--limit", "depth=20"]) == 2
    assert "refused: pickle nests deeper than 20 levels (limit depth=20)" in capsys.readouterr().err


def test_the_opcode_and_memo_limits(tmp_path) -> None:
    with pytest.raises(LimitExceeded, match=r"more than 10 opcodes"):
        read_pickle(b"\x80\x02" + b"N0" * 10 + b"N.", Budget(Limits(opcodes=10)))
    with pytest.raises(LimitExceeded, match=r"memo holds more than 3 entries"):
        read_pickle(b"\x80\x04N" + b"\x94" * 5 + b".", Budget(Limits(memo=3)))


def test_parse_limit_names_the_choices() -> None:
    assert parse_limit("seconds=2.5", Limits()).seconds == 2.5
    assert parse_limit("items=1_000", Limits()).items == 1000
    with pytest.raises(ValueError, match=r"NAME one of pickle_bytes, opcodes"):
        parse_limit("speed=3", Limits())
    with pytest.raises(ValueError, match=r"must be positive"):
        parse_limit("depth=0", Limits())


def test_a_fifo_is_refused_without_being_opened(tmp_path, capsys) -> None:
    os.mkfifo(tmp_path / "x.pt")  # opening it for reading would block forever
    assert main(["inspect", str(tmp_path / "x.pt")]) == 2
    assert "refused: x.pt is a FIFO (named pipe), not a regular file" in capsys.readouterr().err
    from traindoctor import checkpoint
    from traindoctor.checkpoint.inspection import CheckpointReadError

    with pytest.raises(CheckpointReadError, match=r"FIFO"):
        checkpoint.load(tmp_path / "x.pt", model=torch.nn.Linear(2, 2))
