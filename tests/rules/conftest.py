"""Fixtures of the rule tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture
def restore_cudnn_flags() -> Iterator[None]:
    """Put back the cudnn flags a test sets (the TD40x tests use it through ``pytestmark``)."""
    cudnn = torch.backends.cudnn
    saved = (cudnn.benchmark, cudnn.deterministic)
    yield
    cudnn.benchmark, cudnn.deterministic = saved
