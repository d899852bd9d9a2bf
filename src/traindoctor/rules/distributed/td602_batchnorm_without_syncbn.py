"""TD602 batchnorm-without-syncbn: DDP with BatchNorm over a small per-rank batch and no SyncBatchNorm."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class BatchnormWithoutSyncbn(Rule):
    code = "TD602"
    name = "batchnorm-without-syncbn"
    severity = Severity.WARNING
    summary = (
        "DDP training with BatchNorm layers over a small per-rank batch and no SyncBatchNorm; "
        "convert them with `SyncBatchNorm.convert_sync_batchnorm` or use GroupNorm."
    )
    gpu_only = False
    static = False
    runtime = True

    what_it_does = """
    Reports, at run time, a distributed run (world size > 1) whose BatchNorm layers (not
    SyncBatchNorm) normalise over a small per-rank batch in training mode.
    """
    why_bad = """
    Under DistributedDataParallel each rank's BatchNorm computes its mean and variance over its
    own slice of the batch only: the optimizer sees `batch x world_size` samples but the
    normalisation sees `batch`. Below roughly 16 samples per rank the batch statistics become
    noisy and differ from the running statistics used at evaluation, and accuracy drops (Wu & He
    2018 show the error rising steeply as the per-device batch shrinks). SyncBatchNorm computes
    the statistics over all ranks; GroupNorm does not depend on the batch at all.
    """
    example = """
    import torch

    model = build_model().cuda()
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])  # 4 images per GPU
    """
    use_instead = """
    import torch

    model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(build_model()).cuda()
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank])

    # or, with traindoctor.recipes (to="group" when per-rank batches are tiny):
    from traindoctor.recipes import convert_batchnorm
    model = convert_batchnorm(build_model(), to="sync").cuda()
    """
    references = (
        "https://pytorch.org/docs/stable/generated/torch.nn.SyncBatchNorm.html",
        "https://arxiv.org/abs/1803.08494",
    )
    options = """
    `TD602.min_batch` (default 16): per-rank samples per forward below which BatchNorm statistics
    are too noisy (most common leading dimension of training-mode BatchNorm inputs). Needs world
    size > 1; SyncBatchNorm layers and BatchNorm without running statistics are not counted.
    """


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor  # noqa: E402


class BatchnormWithoutSyncbnMonitor(Monitor):
    """World size > 1, training-mode BatchNorm layers (not SyncBatchNorm) that track running
    statistics, and a small per-rank batch (most common leading dimension < ``min_batch``)."""

    rule = BatchnormWithoutSyncbn

    def on_run_end(self) -> None:
        world = int(getattr(self.session, "world_size", 1) or 1)
        # Whether any optimizer stepped: the session counts the calls (no per-step hook here).
        if world <= 1 or not getattr(self.session, "optimizer_calls", 0):
            return
        from traindoctor.facts.batching.runtime import small_batchnorm_batch

        min_batch = int(self.threshold("min_batch", 16))
        small = small_batchnorm_batch(self.session, min_batch)
        if small is None:
            return
        layers, batch = small
        self.report(
            f"{len(layers)} BatchNorm layer(s) normalise over {batch} samples per rank while "
            f"{world} ranks train together; convert them with "
            "`torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)` before wrapping in DDP "
            "(or use GroupNorm).",
            evidence={
                "per_rank_batch": batch,
                "world_size": world,
                "global_batch": batch * world,
                "batchnorm_layers": len(layers),
                "min_batch": min_batch,
            },
            step=self.session.step,
        )
