"""A corpus of hostile checkpoints, generated (never committed as blobs): ``python hostile_corpus.py DIR``.

Each case is a folder holding the file (or DCP directory) to read and the path of a *canary*: the
file its payload would create if anything ran it (``os.system("touch CANARY")`` and friends).
Three groups:

* code: streams that run a command when unpickled, in every protocol (0-5), every call opcode
  (REDUCE, INST, OBJ, NEWOBJ), names mapped from Python 2, dotted ``STACK_GLOBAL`` names through
  an allowed module, broken streams that call before they break, legacy files, torch's own
  ``_load_from_bytes`` back door; DCP directories with such a ``.metadata``, a payload in a
  traindoctor ``rank_0.pt``;
* paths: DCP shards outside the folder (absolute, ``..``, a symlink), ranges past a shard's end,
  a FIFO and a device named like a checkpoint;
* resources: nesting a million deep, memo fan-out, many small dicts, zip bombs, a huge zip
  directory, giant integers, colliding keys, forged DCP fields and ``traindoctor.json``.

``expect`` says what a correct reader reports: ``unsafe`` (flagged, exit 1), ``refused`` (a
clear error, exit 2) or ``not-resumable`` (read, but not called resumable, exit 1);
``message`` is a regular expression the report must contain.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import stat
import struct
import sys
import zipfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass
class Case:
    name: str
    group: str
    target: str
    canary: str
    expect: str
    message: str
    #: Whether ``traindoctor.checkpoint.load`` is run on it too (DCP directories).
    load: bool = False
    #: Whether the pickle scanners (picklescan, fickling) are run on it.
    scan: bool = False


CASES: list[tuple[str, str, str, str, bool, bool, Callable[[Path, str], Path]]] = []


def case(
    group: str, expect: str, message: str, load: bool = False, scan: bool = False
) -> Callable[[Callable[[Path, str], Path]], Callable[[Path, str], Path]]:
    def register(build: Callable[[Path, str], Path]) -> Callable[[Path, str], Path]:
        CASES.append((build.__name__, group, expect, message, load, scan, build))
        return build

    return register


# --------------------------------------------------------------------------- pickle bytes


def s(text: str) -> bytes:
    """Push a str (BINUNICODE)."""
    data = text.encode("utf-8")
    return b"X" + struct.pack("<I", len(data)) + data


def sg(module: str, name: str) -> bytes:
    """STACK_GLOBAL(module, name)."""
    return s(module) + s(name) + b"\x93"


def p(n: int) -> bytes:
    return b"\x80" + bytes([n])


def call(func: bytes, *args: bytes) -> bytes:
    """``func(*args)`` with REDUCE."""
    return func + b"(" + b"".join(args) + b"tR"


def touch(canary: str) -> str:
    return f"touch {canary}"


def system_call(canary: str) -> bytes:
    return call(sg("os", "system"), s(touch(canary)))


def torch_zip(data_pkl: bytes, extra: dict[str, bytes] | None = None, compress: int = zipfile.ZIP_STORED) -> bytes:
    """A zip laid out like ``torch.save``'s: ``archive/data.pkl``, ``archive/version``, storages."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compress) as zf:
        zf.writestr("archive/data.pkl", data_pkl)
        zf.writestr("archive/byteorder", "little")
        zf.writestr("archive/version", "3\n")
        for name, data in (extra or {}).items():
            zf.writestr(f"archive/{name}", data)
    return out.getvalue()


class _Dotted:
    """Stands for a global written as STACK_GLOBAL(module, name) with any name (dots included)."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name = module, name

    def __reduce__(self) -> str:
        return "unused"

    def __call__(self, *args: object) -> None:  # pickle wants a callable in a reduce tuple
        raise AssertionError("never called")


class _Payload:
    """Unpickles as ``func(*args)``."""

    def __init__(self, func: object, *args: object) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return self.func, self.args


class _ForgingPickler(pickle._Pickler):  # the pure-Python pickler lets a global be written by hand
    def save_global(self, obj: object, name: str | None = None) -> None:
        if isinstance(obj, _Dotted):
            self.save(obj.module)
            self.save(obj.name)
            self.write(pickle.STACK_GLOBAL)
            self.memoize(obj)
            return
        super().save_global(obj, name)


def forge(obj: object, protocol: int = 4) -> bytes:
    out = io.BytesIO()
    _ForgingPickler(out, protocol=protocol).dump(obj)
    return out.getvalue()


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --------------------------------------------------------------------------- code


def _raw_protocol(protocol: int) -> Callable[[Path, str], Path]:
    def build(folder: Path, canary: str) -> Path:
        return write(folder / "evil.pkl", pickle.dumps(_Payload(os.system, touch(canary)), protocol=protocol))

    build.__name__ = f"raw_pickle_protocol_{protocol}"
    return build


for _protocol in range(6):
    case("code", "unsafe", r"UNSAFE", scan=True)(_raw_protocol(_protocol))


@case("code", "unsafe", r"posix\.system|os\.system", scan=True)
def zip_reduce_os_system(folder: Path, canary: str) -> Path:
    data = pickle.dumps({"model": {}, "payload": _Payload(os.system, touch(canary))}, protocol=2)
    return write(folder / "evil.pt", torch_zip(data))


@case("code", "unsafe", r"os\.system", scan=True)
def protocol0_global_by_hand(folder: Path, canary: str) -> Path:
    return write(folder / "p0.pt", f"cos\nsystem\n(S'{touch(canary)}'\ntR.".encode())


@case("code", "unsafe", r"os\.system", scan=True)
def protocol0_inst(folder: Path, canary: str) -> Path:
    return write(folder / "inst.pkl", f"(S'{touch(canary)}'\nios\nsystem\n.".encode())


@case("code", "unsafe", r"os\.system", scan=True)
def protocol1_obj(folder: Path, canary: str) -> Path:
    return write(folder / "obj.pkl", f"(cos\nsystem\nS'{touch(canary)}'\no.".encode())


@case("code", "unsafe", r"subprocess\.Popen", scan=True)
def subprocess_popen(folder: Path, canary: str) -> Path:
    data = p(2) + call(sg("subprocess", "Popen"), b"(" + s("touch") + s(canary) + b"l") + b"."
    return write(folder / "popen.pt", torch_zip(data))


@case("code", "unsafe", r"builtins\.eval", scan=True)
def python2_builtin_name_mapped(folder: Path, canary: str) -> Path:
    code = f"__import__('os').system('{touch(canary)}')"
    return write(folder / "eval.pkl", p(2) + b"c__builtin__\neval\n(" + s(code) + b"tR.")


@case("code", "unsafe", r"builtins\.exec", scan=True)
def builtins_exec(folder: Path, canary: str) -> Path:
    code = f"open({canary!r}, 'w').close()"
    return write(folder / "exec.pt", torch_zip(p(4) + call(sg("builtins", "exec"), s(code)) + b"."))


@case("code", "unsafe", r"torch\.distributed\.checkpoint\.filesystem\.os\.system.*dotted", scan=True)
def dotted_name_through_allowed_module(folder: Path, canary: str) -> Path:
    func = sg("torch.distributed.checkpoint.filesystem", "os.system")
    return write(folder / "dotted.pkl", p(4) + call(func, s(touch(canary))) + b".")


@case("code", "unsafe", r"torch\.os\.system", scan=True)
def dotted_name_through_torch(folder: Path, canary: str) -> Path:
    data = p(4) + b"}" + s("model") + b"}" + s("x") + call(sg("torch", "os.system"), s(touch(canary))) + b"ss."
    return write(folder / "dotted.pt", torch_zip(data))


@case("code", "unsafe", r"torch\.storage\._load_from_bytes", scan=True)
def torch_load_from_bytes_back_door(folder: Path, canary: str) -> Path:
    inner = pickle.dumps(_Payload(os.system, touch(canary)), protocol=2)
    data = p(2) + call(sg("torch.storage", "_load_from_bytes"), b"C" + bytes([len(inner)]) + inner) + b"."
    return write(folder / "bytes.pt", torch_zip(data))


@case("code", "unsafe", r"copyreg\.extension", scan=True)
def extension_registry_code(folder: Path, canary: str) -> Path:
    return write(folder / "ext.pkl", p(2) + b"\x82\x01" + b"(" + s(touch(canary)) + b"tR.")


@case("code", "refused", r"UNSAFE.*os\.system.*before it breaks off", scan=True)
def broken_stream_calls_first(folder: Path, canary: str) -> Path:
    return write(folder / "broken.pt", f"cos\nsystem\n(S'{touch(canary)}'\ntR(((\xff".encode("latin-1"))


@case("code", "refused", r"legacy.*(posix|os)\.system.*UNSAFE", scan=True)
def legacy_file_with_payload(folder: Path, canary: str) -> Path:
    magic = pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2)
    version = pickle.dumps(1001, protocol=2)
    info = pickle.dumps({"little_endian": True}, protocol=2)
    data = pickle.dumps(_Payload(os.system, touch(canary)), protocol=2)
    return write(folder / "legacy.pt", magic + version + info + data + pickle.dumps([], protocol=2))


@case("code", "refused", r"BUILD applied to the global")
def build_on_an_allowed_class(folder: Path, canary: str) -> Path:
    data = p(2) + sg("collections", "OrderedDict") + b"N}" + s("__reduce__") + s(canary) + b"s\x86b."
    return write(folder / "build.pt", torch_zip(data))


@case("code", "unsafe", r"UNSAFE", scan=True)
def whole_pickled_object_of_a_local_module(folder: Path, canary: str) -> Path:
    # a class from a module next to the file: unpickling would import (run) that module
    (folder / "evil_module.py").write_text(f"import os\nos.system({touch(canary)!r})\nclass Net: pass\n")
    data = p(2) + sg("evil_module", "Net") + b")\x81}(" + s("_parameters") + b"}" + s("_modules") + b"}ub."
    return write(folder / "model.pt", torch_zip(data))


# --------------------------------------------------------------------------- DCP directories


def _dcp_dir(folder: Path) -> Path:
    import torch
    import torch.distributed.checkpoint as dcp

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    from torch.distributed.checkpoint.state_dict import get_state_dict

    msd, osd = get_state_dict(model, opt)
    ckpt = folder / "ck"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save({"model": msd, "optimizer": osd}, checkpoint_id=ckpt, no_dist=True)
    return ckpt


def _metadata(ckpt: Path) -> object:
    from torch.distributed.checkpoint import FileSystemReader

    return FileSystemReader(ckpt).read_metadata()


@case("code", "unsafe", r"torch\.distributed\.checkpoint\.filesystem\.os\.system", load=True, scan=True)
def dcp_metadata_dotted_stack_global(folder: Path, canary: str) -> Path:
    ckpt = _dcp_dir(folder)
    meta = _metadata(ckpt)
    meta.state_dict_metadata["payload"] = _Payload(
        _Dotted("torch.distributed.checkpoint.filesystem", "os.system"), touch(canary)
    )
    write(ckpt / ".metadata", forge(meta, protocol=4))
    return ckpt


@case("code", "unsafe", r"posix\.system|os\.system", load=True, scan=True)
def dcp_metadata_reduce(folder: Path, canary: str) -> Path:
    ckpt = _dcp_dir(folder)
    meta = _metadata(ckpt)
    meta.storage_meta = _Payload(os.system, touch(canary))
    write(ckpt / ".metadata", pickle.dumps(meta, protocol=5))
    return ckpt


@case("code", "unsafe", r"posix\.system|os\.system", load=True)
def dcp_rank_file_payload(folder: Path, canary: str) -> Path:
    ckpt = _dcp_dir(folder)
    data = pickle.dumps({"rank": 0, "rng": {}, "x": _Payload(os.system, touch(canary))}, protocol=2)
    write(ckpt / "rank_0.pt", torch_zip(data))
    write(ckpt / "traindoctor.json", json.dumps({"world_size": 1, "step": 1}).encode())
    return ckpt


# --------------------------------------------------------------------------- paths


def _move_shard(folder: Path, relative: Callable[[Path, Path], str]) -> Path:
    """A DCP directory whose ``.metadata`` names its shard by ``relative(ckpt, moved_shard)``."""
    ckpt = _dcp_dir(folder)
    outside = folder / "outside"
    outside.mkdir()
    shard = outside / "__0_0.distcp"
    shutil.move(str(ckpt / "__0_0.distcp"), shard)
    meta = _metadata(ckpt)
    for info in meta.storage_data.values():
        info.relative_path = relative(ckpt, shard)
    write(ckpt / ".metadata", pickle.dumps(meta, protocol=4))
    return ckpt


@case("paths", "refused", r"absolute path", load=True)
def dcp_absolute_shard_path(folder: Path, canary: str) -> Path:
    return _move_shard(folder, lambda ckpt, shard: str(shard))


@case("paths", "refused", r"absolute path", load=True)
def dcp_shard_is_a_system_file(folder: Path, canary: str) -> Path:
    return _move_shard(folder, lambda ckpt, shard: "/etc/passwd")


@case("paths", "refused", r"outside the checkpoint", load=True)
def dcp_shard_climbs_out(folder: Path, canary: str) -> Path:
    return _move_shard(folder, lambda ckpt, shard: "../outside/__0_0.distcp")


@case("paths", "refused", r"outside the checkpoint", load=True)
def dcp_shard_symlink_out(folder: Path, canary: str) -> Path:
    ckpt = _move_shard(folder, lambda ckpt, shard: "__0_0.distcp")
    os.symlink(folder / "outside" / "__0_0.distcp", ckpt / "__0_0.distcp")
    return ckpt


@case("paths", "refused", r"bytes \d+\.\.\d+ of __0_0\.distcp, which has \d+ bytes", load=True)
def dcp_range_past_the_shard(folder: Path, canary: str) -> Path:
    ckpt = _dcp_dir(folder)
    meta = _metadata(ckpt)
    for info in meta.storage_data.values():
        info.offset += 10_000_000
    write(ckpt / ".metadata", pickle.dumps(meta, protocol=4))
    return ckpt


@case("paths", "refused", r"FIFO")
def fifo_named_like_a_checkpoint(folder: Path, canary: str) -> Path:
    os.mkfifo(folder / "x.pt")
    return folder / "x.pt"


@case("paths", "refused", r"character device")
def device_named_like_a_checkpoint(folder: Path, canary: str) -> Path:
    os.symlink("/dev/zero", folder / "zero.pt")
    return folder / "zero.pt"


@case("paths", "refused", r"FIFO", load=True)
def dcp_metadata_is_a_fifo(folder: Path, canary: str) -> Path:
    ckpt = _dcp_dir(folder)
    (ckpt / ".metadata").unlink()
    os.mkfifo(ckpt / ".metadata")
    return ckpt


# --------------------------------------------------------------------------- resources


@case("resources", "refused", r"nests deeper than \d+")
def tuple_a_million_deep(folder: Path, canary: str) -> Path:
    return write(folder / "deep.pkl", p(2) + b")" + b"\x85" * 1_000_000 + b".")


@case("resources", "refused", r"nests deeper than \d+")
def tuple_a_million_deep_as_a_dict_key(folder: Path, canary: str) -> Path:
    data = p(2) + b"}" + b")" + b"\x85" * 1_000_000 + b"K\x01s" + s("x") + b")" + b"\x85" * 2000 + b"s."
    return write(folder / "deepkey.pt", torch_zip(data, compress=zipfile.ZIP_DEFLATED))


@case("resources", "refused", r"nests deeper than \d+")
def list_chain_deepened_through_the_memo(folder: Path, canary: str) -> Path:
    # each new list is appended to the previous one, fetched from the memo
    body = bytearray(p(2) + b"]r" + struct.pack("<I", 0) + b"0")
    for index in range(1, 200_000):
        body += b"j" + struct.pack("<I", index - 1) + b"]r" + struct.pack("<I", index) + b"a0"
    body += b"j" + struct.pack("<I", 0) + b"."
    return write(folder / "chain.pt", torch_zip(bytes(body), compress=zipfile.ZIP_DEFLATED))


@case("resources", "not-resumable", r"not resumable|not a resumable")
def memo_fan_out(folder: Path, canary: str) -> Path:
    # level k: a list of 1000 references to level k-1, six levels (10**18 paths)
    body = bytearray(p(2) + b"]q\x00")
    for level in range(1, 7):
        body += b"](" + (b"h" + bytes([level - 1])) * 1000 + b"eq" + bytes([level])
    body += b"."
    return write(folder / "fanout.pt", torch_zip(bytes(body), compress=zipfile.ZIP_DEFLATED))


@case("resources", "refused", r"more than \d+ values to describe|nests deeper")
def memo_fan_out_of_dicts(folder: Path, canary: str) -> Path:
    # one optimizer-shaped dict referenced by 50 000 distinct optimizer dicts: no quadratic work
    body = bytearray(p(2) + b"}q\x00(")
    for index in range(200_000):
        body += b"J" + struct.pack("<i", index) + b"}" + s("exp_avg") + b"K\x01s"
    body += b"u(" + b"".join(b"}" + s("state") + b"h\x00s" + s("param_groups") + b"]s" for _ in range(50_000))
    body += b"l."
    return write(folder / "fandict.pt", torch_zip(bytes(body), compress=zipfile.ZIP_DEFLATED))


@case("resources", "not-resumable", r"not resumable")
def many_small_dicts_compressed(folder: Path, canary: str) -> Path:
    body = p(2) + b"(" + b"".join(b"}" + s("batches_done") + b"K\x01s" for _ in range(100_000)) + b"l."
    return write(folder / "dicts.pt", torch_zip(body, compress=zipfile.ZIP_DEFLATED))


@case("resources", "refused", r"data\.pkl is \d+ bytes once decompressed")
def zip_bomb_declared(folder: Path, canary: str) -> Path:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        with zf.open("archive/data.pkl", "w", force_zip64=True) as member:
            chunk = b"N0" * (1 << 20)
            for _ in range(40):  # 80 MiB of NONE, POP
                member.write(chunk)
    return write(folder / "bomb.pt", out.getvalue())


@case("resources", "refused", r"more than \d+ opcodes")
def zip_bomb_within_the_byte_limit(folder: Path, canary: str) -> Path:
    return write(folder / "ops.pt", torch_zip(p(2) + b"N0" * (30 << 20) + b"N.", compress=zipfile.ZIP_DEFLATED))


@case("resources", "refused", r"corrupt|CRC|truncated")
def zip_bomb_lying_header(folder: Path, canary: str) -> Path:
    data = bytearray(torch_zip(p(2) + b"N0" * (8 << 20) + b"N.", compress=zipfile.ZIP_DEFLATED))
    # shrink the declared size of data.pkl (the first member) in both of its headers
    struct.pack_into("<I", data, 22, 100)
    struct.pack_into("<I", data, bytes(data).find(b"PK\x01\x02") + 24, 100)
    return write(folder / "liar.pt", bytes(data))


@case("resources", "refused", r"more than \d+ members")
def zip_directory_of_300_000_members(folder: Path, canary: str) -> Path:
    entry = b"PK\x01\x02" + b"\x00" * 24 + struct.pack("<HHH", 1, 0, 0) + b"\x00" * 12 + b"x"
    count = 300_000
    directory = entry * count
    eocd = b"PK\x05\x06" + struct.pack("<HHHHLLH", 0, 0, 0xFFFF, 0xFFFF, len(directory), 30, 0)
    local = b"PK\x03\x04" + b"\x00" * 26
    return write(folder / "members.pt", local + directory + eocd)


@case("resources", "refused", r"integer of \d+ bits")
def giant_integer(folder: Path, canary: str) -> Path:
    big = b"\x01" * (1 << 20)
    return write(folder / "int.pt", torch_zip(p(2) + b"\x8b" + struct.pack("<I", len(big)) + big + b"."))


@case("resources", "refused", r"neither a zip archive nor a readable pickle|corrupt")
def integer_text_past_the_str_limit(folder: Path, canary: str) -> Path:
    return write(folder / "text.pkl", b"L" + b"9" * 10_000 + b"L\n.")


@case("resources", "not-resumable", r"not resumable|not a resumable")
def colliding_int_keys(folder: Path, canary: str) -> Path:
    # integers 2**61-1 apart hash alike: a plain dict would probe quadratically
    step = (1 << 61) - 1
    keys = b"".join(b"\x8a\x0c" + (1 + i * step).to_bytes(12, "little") + b"N" for i in range(100_000))
    return write(folder / "keys.pt", torch_zip(p(2) + b"}(" + keys + b"u.", compress=zipfile.ZIP_DEFLATED))


@case("resources", "refused", r"memo holds more than \d+ entries")
def memo_of_two_million(folder: Path, canary: str) -> Path:
    body = p(4) + b"N" + b"".join(b"r" + struct.pack("<I", i) for i in range(2_000_000)) + b"."
    return write(folder / "memo.pt", torch_zip(body, compress=zipfile.ZIP_DEFLATED))


@case("resources", "refused", r"more than \d+ global references")
def a_million_globals(folder: Path, canary: str) -> Path:
    body = p(2) + b"N" + b"ctorch\nSize\n0" * 1_000_000 + b"."
    return write(folder / "globals.pt", torch_zip(body, compress=zipfile.ZIP_DEFLATED))


@case("resources", "not-resumable", r"not resumable")
def huge_tensor_shapes(folder: Path, canary: str) -> Path:
    storage = b"(" + s("storage") + sg("torch", "FloatStorage") + s("0") + s("cpu") + b"K\x01t\x51"
    huge = b"\x8a\x08" + (1 << 62).to_bytes(8, "little")
    dims = b"(" + huge + huge + b"t"
    tensor = call(sg("torch._utils", "_rebuild_tensor_v2"), storage, b"K\x00", dims, b"(K\x01K\x01t", b"\x89", b"N")
    body = p(2) + b"}" + s("w") + tensor + b"s."
    return write(folder / "shape.pt", torch_zip(body, extra={"data/0": b"\x00" * 4}))


@case("resources", "not-resumable", r"not resumable")
def long_keys_nested_deep(folder: Path, canary: str) -> Path:
    # 900 nested dicts under 180-character keys, 20 000 leaves at the bottom
    key = s("k" * 180)
    body = bytearray(p(2))
    for _ in range(900):
        body += b"}" + key
    body += b"}(" + b"".join(b"J" + struct.pack("<i", i) + b"N" for i in range(20_000)) + b"u"
    body += b"s" * 900 + b"."
    return write(folder / "paths.pt", torch_zip(bytes(body), compress=zipfile.ZIP_DEFLATED))


@case("resources", "not-resumable", r"not resumable")
def empty_dict_checkpoint(folder: Path, canary: str) -> Path:
    return write(folder / "e.pt", torch_zip(p(2) + b"}."))


@case("resources", "not-resumable", r"not resumable")
def none_checkpoint(folder: Path, canary: str) -> Path:
    return write(folder / "none.pt", torch_zip(p(2) + b"N."))


@case("resources", "not-resumable", r"not resumable")
def scalar_dict_checkpoint(folder: Path, canary: str) -> Path:
    return write(folder / "a.pt", torch_zip(p(2) + b"}" + s("a") + b"K\x01s."))


def _forged_dcp_field(folder: Path, change: Callable[[object], None]) -> Path:
    ckpt = _dcp_dir(folder)
    meta = _metadata(ckpt)
    change(meta)
    write(ckpt / ".metadata", pickle.dumps(meta, protocol=4))
    return ckpt


def _set_lengths(value: object) -> Callable[[object], None]:
    def change(meta: object) -> None:
        for info in meta.storage_data.values():
            info.length = value

    return change


@case("resources", "refused", r"length of .* not a byte count", load=True)
def dcp_string_lengths(folder: Path, canary: str) -> Path:
    return _forged_dcp_field(folder, _set_lengths("1" * 5000))


@case("resources", "refused", r"integer of \d+ bits", load=True)
def dcp_length_ten_to_the_2500(folder: Path, canary: str) -> Path:
    return _forged_dcp_field(folder, _set_lengths(10**2500))


@case("resources", "refused", r"state_dict_metadata is not a dict", load=True)
def dcp_entries_a_list(folder: Path, canary: str) -> Path:
    def change(meta: object) -> None:
        meta.state_dict_metadata = list(meta.state_dict_metadata)

    return _forged_dcp_field(folder, change)


def _manifest(folder: Path, text: str) -> Path:
    ckpt = _dcp_dir(folder)
    (ckpt / "traindoctor.json").write_text(text)
    return ckpt


@case("resources", "refused", r"world_size .*not a world size", load=True)
def manifest_world_of_a_billion(folder: Path, canary: str) -> Path:
    return _manifest(folder, '{"world_size": 1000000000}')


@case("resources", "refused", r"world_size .*not a world size", load=True)
def manifest_world_not_a_number(folder: Path, canary: str) -> Path:
    return _manifest(folder, '{"world_size": "many"}')


@case("resources", "refused", r"world_size .*not a world size", load=True)
def manifest_world_ten_to_the_2500(folder: Path, canary: str) -> Path:
    return _manifest(folder, '{"world_size": 1' + "0" * 2500 + "}")


@case("resources", "refused", r"not a JSON object \(a list\)", load=True)
def manifest_a_list(folder: Path, canary: str) -> Path:
    return _manifest(folder, "[1, 2, 3]")


@case("resources", "refused", r"not valid JSON", load=True)
def manifest_nested_a_million_deep(folder: Path, canary: str) -> Path:
    return _manifest(folder, "[" * 1_000_000 + "]" * 1_000_000)


# --------------------------------------------------------------------------- building


def build(root: Path, names: list[str] | None = None) -> list[Case]:
    """Write every case (or those named) under ``root``; return their descriptions."""
    out = []
    for name, group, expect, message, load, scan, make in CASES:
        if names is not None and name not in names:
            continue
        folder = root / name
        folder.mkdir(parents=True)
        canary = str(folder / "CANARY")
        target = make(folder, canary)
        out.append(Case(name, group, str(target), canary, expect, message, load, scan))
    return out


def is_special(path: str) -> bool:
    mode = os.stat(path).st_mode
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: hostile_corpus.py DIR")
    cases = build(Path(sys.argv[1]))
    print(json.dumps([asdict(c) for c in cases], indent=1))
