import os
import sys

# Tests run against the source tree even without an editable install.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

import pytest

# `traindoctor check` keeps a cache next to the checked project (or in the working directory);
# tests must not share results through it. The cache tests turn it back on explicitly.
os.environ.setdefault("TRAINDOCTOR_NO_CACHE", "1")


@pytest.fixture(autouse=True)
def _restore_torch_backend_flags():
    """Scripts run in-process (examples, user-style loops) may flip process-wide cudnn flags;
    put them back so no test depends on the order tests ran in. Never imports torch itself."""
    torch = sys.modules.get("torch")
    saved = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic) if torch else None
    yield
    torch = sys.modules.get("torch")
    if torch is not None:
        cudnn = torch.backends.cudnn
        cudnn.benchmark, cudnn.deterministic = saved if saved is not None else (False, False)


@pytest.fixture(autouse=True)
def _restore_environment():
    """Some recipes record settings in os.environ (so that worker processes inherit them,
    e.g. ``seed_everything(workers=True)``); no test may see another test's settings."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)
