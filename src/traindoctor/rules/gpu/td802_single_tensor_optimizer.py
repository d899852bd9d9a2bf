"""TD802 single-tensor-optimizer: a CUDA optimizer steps with per-tensor kernels while its step is visible."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Rule


class SingleTensorOptimizer(Rule):
    code = "TD802"
    name = "single-tensor-optimizer"
    severity = Severity.INFO
    summary = (
        "A CUDA optimizer steps with per-tensor kernels (`foreach=False`, or Adam/AdamW without "
        "`fused=True`) while its step is a visible share of GPU time; drop `foreach=False` or pass "
        "`fused=True`."
    )
    gpu_only = True
    static = False
    runtime = True
    fixable = "never"

    what_it_does = """
    Reports, at run time on CUDA, a `torch.optim` optimizer that steps with kernels per
    parameter or per operation while the optimizer step takes a visible share of the GPU's step
    time (CUDA events around `optimizer.step()`): one built with `foreach=False` (a loop of
    kernels for every parameter), or an `Adam`/`AdamW` without `fused=True` (PyTorch's default
    on CUDA is the multi-tensor `foreach` path; the fused kernel does the whole update in one
    pass). Optimizers built with `differentiable=True` (no fused path) and optimizers outside
    `torch.optim` are left alone. It names the optimizer's construction line.
    """
    why_bad = """
    The single-tensor path launches several small kernels for every parameter: for a model with
    hundreds of parameter tensors that is thousands of launches per step, and the GPU idles
    between them. The `foreach` path groups the tensors into a few multi-tensor kernels, and the
    `fused` Adam/AdamW kernel reads and writes each parameter, gradient and state once. On
    transformer-sized models the optimizer step often shrinks several-fold.
    """
    example = """
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=False)
    """
    use_instead = """
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    """
    options = """
    GPU-only, runtime only. Fires when the optimizer's GPU time is at least `TD802.min_share`
    (default 0.10) of the GPU's step time (means over the steady timed steps).
    """
    references = (
        "https://pytorch.org/docs/stable/optim.html#algorithms",
        "https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html",
    )


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class SingleTensorOptimizerMonitor(Monitor):
    """Per-tensor optimizer kernels while the optimizer step is a visible share of GPU time."""

    rule = SingleTensorOptimizer

    def on_run_end(self) -> None:
        gpu = self.session.gpu_profile
        if gpu is None or gpu.span <= 0 or not gpu.steps:
            return
        share = gpu.share(gpu.busy["optimizer"])
        if share < float(self.threshold("min_share", 0.10)):
            return
        from traindoctor.facts.gpu.runtime import optimizer_kernels
        from traindoctor.runtime.live import site_kwargs

        for optimizer in self.session.optimizers:
            kind = optimizer_kernels(optimizer)
            if kind is None:
                continue
            name = type(optimizer).__name__
            fix = "drop `foreach=False` (or pass `fused=True`)" if kind == "for-loop" else "pass `fused=True`"
            how = "one set of kernels per parameter (`foreach=False`)" if kind == "for-loop" else "multi-tensor kernels"
            self.report(
                f"{name} stepped with {how} and the optimizer step took {share:.0%} of the GPU's "
                f"step time; {fix} to update all parameters in fewer kernels.",
                evidence={
                    "optimizer": name,
                    "implementation": kind,
                    "optimizer_share": round(share, 4),
                    "optimizer_ms": round(gpu.busy["optimizer"] * 1000.0, 4),
                    "gpu_step_ms": round(gpu.span * 1000.0, 4),
                    "param_tensors": sum(len(g["params"]) for g in optimizer.param_groups),
                },
                step=self.session.step or None,
                help="Pass `fused=True`" if kind == "foreach" else "Drop `foreach=False`",
                **site_kwargs(self.session.optimizer_site(optimizer)),
            )
            return
