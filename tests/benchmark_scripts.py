"""Load a script of ``benchmarks/`` (not a package) as a module, for the tests of that script."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@contextmanager
def benchmark_module(name: str) -> Iterator[ModuleType]:
    """``benchmarks/<name>.py`` as module ``name``, registered in ``sys.modules`` while it is in
    use (dataclasses look their module up while the class is built) and removed afterwards."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)
