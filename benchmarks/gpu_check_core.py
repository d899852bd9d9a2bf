"""The pieces every row of ``gpu_check.py`` is made of: the device context, one result row, the
timed-check wrapper and small helpers around a watched run (see ``gpu_check.py``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

NEEDS_GPU = (
    "gpu_check needs an NVIDIA GPU with CUDA: torch.cuda.is_available() is False here, "
    "so nothing was run. Run it on a GPU machine: make gpu-check"
)
CPU_WHEEL = (
    "gpu_check needs torch's CUDA wheel: this torch ({version}) was built without CUDA, so nothing "
    "was run. Install the CUDA wheel as the docstring of benchmarks/gpu_check.py says, then: make gpu-check"
)
FRAMEWORK_SCRIPTS = ROOT / "tests" / "integrations" / "scripts"


@dataclass
class Result:
    """One row of the table: a check on one variant."""

    check: str
    variant: str
    expected: list[str]
    observed: list[str]
    passed: bool
    seconds: float
    numbers: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def row(self) -> str:
        status = "error" if self.error else ("pass" if self.passed else "FAIL")
        numbers = ", ".join(f"{k}={_fmt(v)}" for k, v in self.numbers.items())
        if self.error:
            numbers = f"{numbers}; {self.error}" if numbers else self.error
        return (
            f"| {self.check} | {self.variant} | {', '.join(self.expected) or '-'} | "
            f"{', '.join(self.observed) or '-'} | {status} | {self.seconds:.1f} | {numbers} |"
        )


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


@dataclass
class Context:
    """Where the workloads run: ``device`` is "cuda" (or "cpu" when rehearsing)."""

    device: str
    bf16_capable: bool
    capability: tuple[int, int] | None
    workdir: Path
    rehearsal: bool = False

    @property
    def small(self) -> bool:
        """Smaller workloads on a CPU rehearsal (same code paths, seconds instead of minutes)."""
        return self.rehearsal

    @property
    def gpu(self) -> bool:
        return self.device == "cuda"

    def expect(self, *codes: str, gpu_only: bool = True) -> list[str]:
        """The codes a run must report here: GPU-only codes never on a CPU rehearsal."""
        return sorted(codes) if (self.gpu or not gpu_only) else []


def _sync(ctx: Context) -> None:
    import torch

    if ctx.gpu:
        torch.cuda.synchronize()


@contextlib.contextmanager
def _cudnn_benchmark(value: bool) -> Iterator[None]:
    import torch

    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = value
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = saved


def _watch(select: list[str], work: Callable[[], None]) -> Any:
    import traindoctor

    with traindoctor.watch(select=select) as doctor:
        work()
    return doctor


def _codes(doctor: Any) -> list[str]:
    return sorted({f.code for f in doctor.findings})


def _evidence(doctor: Any, code: str) -> dict[str, Any]:
    for f in doctor.findings:
        if f.code == code:
            return dict(f.evidence or {})
    return {}


def _timed(
    check: str,
    variant: str,
    expected: list[str],
    body: Callable[[], tuple[list[str], dict[str, Any]]],
    passed: Callable[[list[str], dict[str, Any]], bool] | None = None,
) -> Result:
    start = time.perf_counter()
    try:
        observed, numbers = body()
        ok = passed(observed, numbers) if passed else observed == expected
        return Result(check, variant, expected, observed, ok, time.perf_counter() - start, numbers)
    except Exception as exc:  # one broken check must not hide the others
        return Result(
            check,
            variant,
            expected,
            [],
            False,
            time.perf_counter() - start,
            error=f"{type(exc).__name__}: {str(exc)[:300]}",
        )
