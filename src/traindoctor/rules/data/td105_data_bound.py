"""TD105 data-bound: the loop still waits for batches although loader workers are in use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.records import LoaderInfo


class DataBound(Rule):
    code = "TD105"
    name = "data-bound"
    severity = Severity.WARNING
    summary = (
        "The training loop keeps waiting for batches although DataLoader workers are in use; make "
        "per-sample loading cheaper or add workers (`traindoctor tune` measures the best settings)."
    )
    gpu_only = False
    static = False
    runtime = True

    what_it_does = """
    For each DataLoader with `num_workers > 0`, measures how long the training loop waits inside
    `next()` in steady state (the first batch of each epoch, which pays worker start-up, is left
    to TD103) and reports the loader when the wait is a large share of the time the loader was
    being iterated and large per batch. The evidence gives the data-wait share, the wait and the
    compute time per batch, the estimated time one worker needs per batch
    (`workers x (wait + compute)` when the workers are saturated) and, when the pipeline model
    (`traindoctor.facts.data.pipeline`: those times, the cores this process may use, the training
    process's intra-op threads) predicts more workers would help, that worker count;
    `traindoctor tune SCRIPT` measures it with the model in the loop.
    """
    why_bad = """
    With workers, loading overlaps with compute; a wait that remains means the workers together
    deliver batches more slowly than the model consumes them, so the model (and the GPU) idles
    for that share of every step. More workers help only while there are idle cores; after that
    the cost per sample has to drop: decode at the size you train at, cache decoded samples,
    use a faster image library or GPU decoding, move augmentation to the GPU. A larger
    `prefetch_factor` smooths bursts but does not raise the sustained rate.
    """
    example = """
    # decoding a batch takes ~400 ms of CPU, a training step 100 ms
    train_loader = DataLoader(jpeg_ds, batch_size=256, shuffle=True, num_workers=2)
    """
    use_instead = """
    train_loader = DataLoader(jpeg_ds, batch_size=256, shuffle=True, num_workers=8,
                              persistent_workers=True, pin_memory=True)
    # and/or make __getitem__ cheaper (decode smaller, cache, augment on the GPU)
    """
    options = """
    Runtime thresholds (`thresholds` in `[tool.traindoctor]`, `--threshold KEY=VALUE` or
    `watch(thresholds=...)`). Reported only when both hold:

    - `TD105.min_wait_share` (default 0.2): steady-state wait inside `next()` as a share of the
      time the loader was being iterated.
    - `TD105.min_wait_ms` (default 5.0): mean steady-state wait per batch in milliseconds.
    - `TD105.min_batches` (default 5): steady-state batches seen before judging.
    """
    references = (
        "https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading",
        "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#enable-async-data-loading-and-augmentation",
    )


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class DataBoundMonitor(Monitor):
    """Loaders with workers whose steady-state data wait is still a real share of the loop."""

    rule = DataBound

    _script: str | None = None

    def on_loader_created(self, info: LoaderInfo) -> None:
        if self._script is None:  # while the script runs, sys.argv[0] is its path
            from traindoctor.facts.data.runtime import script_name

            self._script = script_name()

    def on_run_end(self) -> None:
        from traindoctor.facts.data import runtime as ev

        min_share = float(self.threshold("min_wait_share", 0.2))
        min_ms = float(self.threshold("min_wait_ms", 5.0))
        min_batches = int(self.threshold("min_batches", 5))
        # A loader only iterated for evaluation is not the training input pipeline.
        for info in self.session.training_loaders():
            if info.num_workers <= 0:
                continue
            timing = ev.loader_timing(info)
            if timing.batches < min_batches:
                continue
            if timing.wait_share <= min_share or timing.wait_ms_per_batch <= min_ms:
                continue
            fetch_ms = info.num_workers * (timing.wait_ms_per_batch + timing.compute_ms_per_batch)
            advice = ev.worker_advice(timing, info, self.session)
            workers = advice.workers
            evidence: dict[str, Any] = {
                "data_wait_share": round(timing.wait_share, 4),
                "wait_ms_per_batch": round(timing.wait_ms_per_batch, 3),
                "compute_ms_per_batch": round(timing.compute_ms_per_batch, 3),
                "fetch_ms_per_batch_per_worker": round(fetch_ms, 3),
                "batches": timing.batches,
                "num_workers": info.num_workers,
                "worker_budget": ev.worker_budget(self.session, info),
                "torch_threads": ev.main_threads(),
            }
            if workers > info.num_workers:
                evidence["recommended_num_workers"] = workers
                evidence["predicted_speedup"] = round(advice.speedup, 2)
                evidence["predicted_speedup_range"] = [round(x, 2) for x in advice.speedup_range]
                text = (
                    f"raise `num_workers` to {workers} (predicted {advice.speedup_text()}; "
                    f"`{ev.tune_command(self._script)}` measures it) or make per-sample loading cheaper"
                )
            else:
                text = (
                    "the workers already use the cores this process has: make per-sample loading "
                    "cheaper (decode less, cache, move augmentation to the GPU)"
                )
            self.report(
                f"With {info.num_workers} worker{'s' if info.num_workers != 1 else ''} the loop "
                "still waited for data "
                f"{timing.wait_share:.0%} of the time ({timing.wait_ms_per_batch:.1f} ms per batch): "
                f"the input pipeline, not the model, sets the pace; {text}.",
                evidence=evidence,
                step=self.session.step or None,
                help=(
                    f"`{ev.tune_command(self._script)} -o tuned.json` measures the best loader settings and "
                    "torch threads on this machine with your model in the loop; use them with "
                    '`DataLoader(ds, batch_size=N, **loader_kwargs(ds, tuned="tuned.json"))`.'
                ),
                **ev.site(info),
            )
