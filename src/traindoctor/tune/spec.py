"""Resolve ``module:attribute`` / ``path/to/file.py:attribute`` to a Dataset object.

Imports the way ``python -c`` would see the code: a module name is imported with the current
directory on ``sys.path``; a file is imported under its own stem (never as ``__main__``, so a
script's ``if __name__ == "__main__":`` block does not run) with its folder on ``sys.path``, so
that worker processes and pickling find the same module. The attribute may be a Dataset (or any
object with ``__len__`` and ``__getitem__``), or a zero-argument callable (a Dataset class, a
factory function) returning one.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any


class SpecError(Exception):
    """The spec names nothing usable; the message says why."""


def _split(spec: str) -> tuple[str, str]:
    target, sep, attribute = spec.rpartition(":")
    if not sep or not target or not attribute:
        raise SpecError(
            f"{spec!r} is not MODULE:ATTRIBUTE or FILE.py:ATTRIBUTE (e.g. mypkg.data:train_set or data.py:make_dataset)"
        )
    return target, attribute


def _prepend(folder: str) -> None:
    if folder not in sys.path:
        sys.path.insert(0, folder)


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise SpecError(f"{path} does not exist")
    name = path.stem
    if not name.isidentifier():
        raise SpecError(f"{path.name}: the file name is not a valid module name")
    resolved = path.resolve()
    existing = sys.modules.get(name)
    if existing is not None:
        existing_file = getattr(existing, "__file__", None)
        if existing_file and Path(existing_file).resolve() == resolved:
            return existing
        raise SpecError(
            f"a different module named {name!r} is already imported; rename {path.name} or use MODULE:ATTRIBUTE"
        )
    _prepend(str(resolved.parent))
    module_spec = importlib.util.spec_from_file_location(name, resolved)
    if module_spec is None or module_spec.loader is None:
        raise SpecError(f"{path} cannot be imported as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise SpecError(f"importing {path} failed: {type(exc).__name__}: {exc}") from None
    return module


def _import_module(name: str) -> ModuleType:
    _prepend(os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise SpecError(f"no module named {name!r} (looked on sys.path and in {os.getcwd()})") from None
        raise SpecError(f"importing {name} failed: ModuleNotFoundError: {exc}") from None
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise SpecError(f"importing {name} failed: {type(exc).__name__}: {exc}") from None


def _is_dataset_like(obj: Any) -> bool:
    from torch.utils.data import Dataset

    if isinstance(obj, Dataset):
        return True
    if isinstance(obj, (type, str, bytes, bytearray, Mapping)):
        return False
    return hasattr(obj, "__getitem__") and hasattr(obj, "__len__")


def _resolve(spec: str) -> tuple[Any, str]:
    target, attribute = _split(spec)
    if target.endswith(".py") or os.sep in target or "/" in target:
        module = _import_file(Path(target))
    else:
        module = _import_module(target)
    obj: Any = module
    for part in attribute.split("."):
        if not hasattr(obj, part):
            raise SpecError(f"{target} has no attribute {attribute!r}")
        obj = getattr(obj, part)
    return obj, f"{target}:{attribute}"


def load_object(spec: str) -> Any:
    """The callable that ``spec`` names (e.g. a collate function)."""
    obj, display = _resolve(spec)
    if not callable(obj):
        raise SpecError(f"{display} is of type {type(obj).__name__}, not a callable")
    return obj


def load_dataset(spec: str) -> tuple[Any, str]:
    """The Dataset that ``spec`` names, and a display name (``module:attribute``)."""
    obj, display = _resolve(spec)
    if _is_dataset_like(obj):
        return obj, display
    if not callable(obj):
        raise SpecError(f"{display} is of type {type(obj).__name__}, not a Dataset or a callable returning one")
    try:
        made = obj()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise SpecError(f"calling {display}() failed: {type(exc).__name__}: {exc}") from None
    if not _is_dataset_like(made):
        raise SpecError(f"{display}() returned an object of type {type(made).__name__}, not a Dataset")
    return made, display
