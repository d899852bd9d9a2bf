"""``dcp.load`` fed only what traindoctor checked.

DCP's ``FileSystemReader`` unpickles ``.metadata`` with ``pickle.load`` and its default planner
reads non-tensor values with ``weights_only=False``. Here the reader unpickles the very bytes
:func:`~traindoctor.checkpoint.dcp_metadata.read_metadata` checked, with an unpickler that
resolves only DCP's metadata classes (exact ``module.name`` pairs, no dotted names), and the
planner reads non-tensor values with ``weights_only=True``, like every other traindoctor file.
"""

from __future__ import annotations

import importlib
import io
import pickle
from pathlib import Path
from typing import Any

from traindoctor.checkpoint.allowlist import dcp_metadata_allowed
from traindoctor.checkpoint.pickle_values import Global


class MetadataUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that finds DCP's metadata classes and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        if not dcp_metadata_allowed(Global(module, name)):
            raise pickle.UnpicklingError(f"refused: .metadata names {module}.{name}, not a DCP metadata class")
        return getattr(importlib.import_module(module), name)

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("refused: .metadata uses a persistent id")


def load_checked(state: dict[str, Any], folder: Path, metadata: bytes) -> None:
    """``dcp.load(state)`` from ``folder``, its ``.metadata`` taken from the checked ``metadata``."""
    from torch.distributed.checkpoint import state_dict_loader

    state_dict_loader.load(state, storage_reader=_reader(folder, metadata), planner=_planner())


def _reader(folder: Path, metadata: bytes) -> Any:
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class CheckedReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            loaded = MetadataUnpickler(io.BytesIO(metadata)).load()
            if getattr(loaded, "storage_meta", None) is None:
                loaded.storage_meta = StorageMeta()
            loaded.storage_meta.load_id = self.load_id
            return loaded

    return CheckedReader(folder)


def _planner() -> Any:
    """DCP's default load planner, except that non-tensor items load with weights_only=True.

    DCP stores non-tensor values (an optimizer's ``lr``, ``step`` ...) as ``torch.save`` bytes
    and its default planner reads them with ``weights_only=False``, which runs code from the
    checkpoint; here they are read like every other traindoctor file.
    """
    import torch
    from torch.distributed.checkpoint._traverse import set_element
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    class SafeLoadPlanner(DefaultLoadPlanner):
        def load_bytes(self, read_item: Any, value: Any) -> None:
            loaded = torch.load(value, weights_only=True)
            if self.flatten_state_dict:
                set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
            else:
                self.state_dict[read_item.dest_index.fqn] = loaded

    return SafeLoadPlanner()
