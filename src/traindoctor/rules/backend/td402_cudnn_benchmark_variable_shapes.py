"""TD402 cudnn-benchmark-variable-shapes: cudnn.benchmark on while conv input shapes keep changing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.live import Site


class CudnnBenchmarkVariableShapes(Rule):
    code = "TD402"
    name = "cudnn-benchmark-variable-shapes"
    severity = Severity.WARNING
    summary = (
        "`cudnn.benchmark` is on while convolution inputs keep changing shape, so every new shape "
        "pays for autotuning again; turn it off or bucket the shapes."
    )
    gpu_only = True
    static = False
    runtime = True

    what_it_does = """
    Reports, at run time, a run with `torch.backends.cudnn.benchmark = True` whose CUDA
    convolution layers keep receiving new input shapes (variable image sizes, variable sequence
    lengths, dynamic crops).
    """
    why_bad = """
    With benchmark mode cuDNN times several algorithms the first time it meets a convolution
    configuration and caches the winner per shape. That pays off when shapes repeat; when they
    keep changing, every new shape triggers another round of trial runs (often tens to hundreds
    of milliseconds, plus workspace allocations), so the run gets slower than with the default
    heuristics.
    """
    example = """
    import torch

    torch.backends.cudnn.benchmark = True
    for images in loader:  # every batch has a different resolution
        loss = model(images.cuda()).mean()
    """
    use_instead = """
    import torch

    torch.backends.cudnn.benchmark = False  # or resize/pad to a few fixed sizes and keep it on
    for images in loader:
        loss = model(images.cuda()).mean()
    """
    references = (
        "https://pytorch.org/docs/stable/backends.html#torch.backends.cudnn.benchmark",
        "https://pytorch.org/docs/stable/notes/randomness.html",
    )
    options = """
    GPU-only. `TD402.min_shapes` (default 8): distinct input shapes one conv layer must see, and
    `TD402.min_new_share` (default 0.05): distinct shapes / forwards of that layer (the share of
    forwards that paid for autotuning).
    """


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class CudnnBenchmarkVariableShapesMonitor(Monitor):
    """``cudnn.benchmark`` on while CUDA conv inputs keep changing shape: each new shape pays
    cuDNN's autotuning. Fires when some conv layer saw at least ``min_shapes`` distinct shapes
    and new shapes made up at least ``min_new_share`` of its forwards. GPU-only."""

    rule = CudnnBenchmarkVariableShapes

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self.flags: dict[str, bool] = {}

    def on_backend_flags(self, flags: Mapping[str, bool], site: Site | None = None) -> None:
        self.flags = dict(flags)

    def on_run_end(self) -> None:
        if not self.session.device.is_cuda or not self.flags.get("benchmark", False):
            return
        if not self.flags.get("enabled", True):
            return  # cuDNN switched off: its benchmark flag does nothing
        from traindoctor.facts.batching.runtime import conv_shapes

        min_shapes = int(self.threshold("min_shapes", 8))
        min_new_share = float(self.threshold("min_new_share", 0.05))
        worst = None
        for shapes in conv_shapes(self.session):
            distinct = len(shapes)
            total = sum(shapes.values())
            if distinct >= min_shapes and total and distinct / total >= min_new_share:
                if worst is None or distinct > len(worst):
                    worst = shapes
        if worst is None:
            return
        total = sum(worst.values())
        examples = [list(s) for s in list(worst)[:3]]
        self.report(
            f"`cudnn.benchmark` is on but conv inputs took {len(worst)} distinct shapes in "
            f"{total} forwards, and each new shape is autotuned again; turn it off, or pad/bucket "
            "inputs to a few fixed shapes.",
            evidence={
                "distinct_shapes": len(worst),
                "forwards": total,
                "example_shapes": examples,
            },
            step=self.session.step,
        )
