"""Which globals a pickle may name: torch's ``weights_only`` allowlist, and DCP's metadata classes.

The semantics are torch's: a global is an exact ``module.name`` pair, matched as two strings.
``pickle`` resolves a dotted name (``STACK_GLOBAL('torch.distributed.checkpoint.filesystem',
'os.system')``) attribute by attribute, reaching anything the module imported, so a name with a
dot is never allowed, whatever its module. Nothing here imports the modules it names.
"""

from __future__ import annotations

import re

from traindoctor.checkpoint.pickle_values import Global

_ALLOWED_EXACT = {
    ("collections", "OrderedDict"),
    ("collections", "Counter"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "bytearray"),
    ("builtins", "complex"),
    ("_codecs", "encode"),
    ("torch", "Size"),
    ("torch", "device"),
    ("torch", "Tensor"),
    ("torch.nn.parameter", "Parameter"),
    ("torch.serialization", "_get_layout"),
    ("torch.storage", "TypedStorage"),
    ("torch.storage", "UntypedStorage"),
    ("torch._tensor", "_rebuild_from_type_v2"),
}
_REBUILD = re.compile(
    r"_rebuild_(tensor(_v[23])?|parameter(_with_state)?|qtensor|sparse_tensor|"
    r"nested_tensor|meta_tensor_no_storage|wrapper_subclass|device_tensor_from_cpu_tensor)\Z"
)
_TENSOR_CLASS_MODULES = {"torch", "torch.cuda", "torch.sparse", "torch.cuda.sparse"}
_TENSOR_CLASS = re.compile(r"[A-Z][A-Za-z0-9]*(Storage|Tensor)\Z")
_TORCH_CONST = re.compile(
    r"(b?float\d+(_[a-z0-9]+)?|u?int\d+|bool|complex\d+|bits\w+|q?u?int\w+|per_\w+|"
    r"strided|sparse_(coo|csr|csc|bsr|bsc)|_mkldnn|contiguous_format|channels_last(_3d)?|"
    r"preserve_format)\Z"
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def is_allowed(ref: Global) -> bool:
    """True for globals that torch's ``weights_only`` unpickler accepts (tensors and plain data)."""
    module, name = ref.module, ref.name
    if not _IDENTIFIER.match(name):
        return False
    return bool(
        (module, name) in _ALLOWED_EXACT
        or (module == "torch._utils" and _REBUILD.match(name))
        or (module in _TENSOR_CLASS_MODULES and _TENSOR_CLASS.match(name))
        or (module == "torch" and _TORCH_CONST.match(name))
    )


#: What DCP's ``.metadata`` is made of (torch 2.x): its dataclasses, paths, sizes, plain
#: containers; with torch's dtypes and memory formats. Not torch's storage and tensor classes,
#: ``bytearray`` or the rebuild functions: ``pickle.load`` (which DCP uses) would call them with
#: sizes from the file.
_DCP_EXACT = {
    ("torch.distributed.checkpoint.metadata", "Metadata"),
    ("torch.distributed.checkpoint.metadata", "MetadataIndex"),
    ("torch.distributed.checkpoint.metadata", "StorageMeta"),
    ("torch.distributed.checkpoint.metadata", "TensorProperties"),
    ("torch.distributed.checkpoint.metadata", "TensorStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "BytesStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "ChunkStorageMetadata"),
    ("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.distributed.checkpoint._hf_utils", "_HFStorageInfo"),
    ("torch.distributed._shard.sharded_tensor.metadata", "TensorProperties"),
    ("torch.distributed._shard.sharded_tensor.metadata", "MEM_FORMAT_ENCODING"),
    ("torch.distributed._shard.metadata", "ShardMetadata"),
    ("torch", "Size"),
    ("torch.serialization", "_get_layout"),
    ("collections", "OrderedDict"),
    ("builtins", "dict"),
    ("builtins", "list"),
    ("builtins", "slice"),
    ("pathlib", "Path"),
    ("pathlib", "PosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "PureWindowsPath"),
}


def dcp_metadata_allowed(ref: Global) -> bool:
    """True for the globals a ``torch.distributed.checkpoint`` ``.metadata`` legitimately names."""
    if (ref.module, ref.name) in _DCP_EXACT:
        return True
    return ref.module == "torch" and bool(_IDENTIFIER.match(ref.name) and _TORCH_CONST.match(ref.name))


def dcp_metadata_classes() -> list[tuple[str, str]]:
    """The exact ``(module, name)`` pairs :func:`dcp_metadata_allowed` accepts (sorted), besides
    torch's dtypes and memory formats."""
    return sorted(_DCP_EXACT)
