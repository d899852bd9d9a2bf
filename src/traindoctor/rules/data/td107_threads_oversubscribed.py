"""TD107 threads-oversubscribed: intra-op threads plus loader workers exceed the cores, and the
step times show the contention."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Rule


class ThreadsOversubscribed(Rule):
    code = "TD107"
    name = "threads-oversubscribed"
    severity = Severity.WARNING
    summary = (
        "The training process's intra-op threads plus the loader workers running beside them need "
        "more cores than this process may use, and the step times vary as contention makes them."
    )
    gpu_only = False
    static = False
    runtime = True

    what_it_does = """
    At run time, on a run that computes on the CPU, adds the training process's intra-op threads
    (`torch.get_num_threads()`) to the peak number of DataLoader worker processes alive at the
    same time (each worker runs one intra-op thread: PyTorch sets it so in every worker) and
    compares the sum with the CPU cores this process may use (`os.sched_getaffinity`, shared by
    the local ranks when they all may run on every core). It reports only when the steps show
    the contention too: the slowest tenth of the steady steps' compute (forward and backward)
    takes twice the median or more, the signature of threads waiting for a core that a worker holds.
    Runs whose model computes on a GPU are not judged; workers alone beyond the cores are TD104.
    Nor are runs on a machine that other programs keep busy (a 1-minute load average of half the
    machine's cores or more before the run started, or beyond this run's own threads and workers
    at its end): uneven steps there tell nothing about this run's split.
    """
    why_bad = """
    PyTorch's CPU kernels split each operation over all intra-op threads and wait for the last
    one. When a loader worker takes a core in the middle of a matrix multiply, one thread's
    share stalls and every other thread waits for it, so a step takes longer than with fewer
    threads that each keep their core. By default `torch.get_num_threads()` is the number of
    cores, so any worker process makes the sum exceed them.
    """
    example = """
    # a 4-core machine: 4 intra-op threads (the default) plus 3 busy workers
    loader = DataLoader(train_ds, batch_size=64, num_workers=3, persistent_workers=True)
    for x, y in loader:
        loss = criterion(model(x), y)
        ...
    """
    use_instead = """
    import os

    import torch

    workers = 3
    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(max(cores - workers, 1))  # leave the workers their cores
    loader = DataLoader(train_ds, batch_size=64, num_workers=workers, persistent_workers=True)

    # or measure the best split on this machine: traindoctor tune train.py
    """
    options = """
    Runtime thresholds (`thresholds` in `[tool.traindoctor]`, `--threshold KEY=VALUE` or
    `watch(thresholds=...)`):

    - `TD107.min_spread` (default 2.0): the 90th percentile of the steady steps' compute time
      over its median at or above which the steps show contention.
    - `TD107.min_compute_ms` (default 2.0): steps whose median compute is shorter are not judged
      (their spread is timer and scheduler noise).
    - `TD107.min_steps` (default 20): steady steps needed to judge.

    Only steps of the usual batch size are compared (an epoch's short last batch is left out). Steps of one batch size whose work still
    differs (sequences of varying length) can look uneven without contention: raise
    `min_spread` or ignore TD107 for such runs.
    """
    references = (
        "https://pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html",
        "https://pytorch.org/docs/stable/generated/torch.set_num_threads.html",
    )


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class ThreadsOversubscribedMonitor(Monitor):
    """Intra-op threads + concurrent workers > usable cores, with a wide compute-time spread."""

    rule = ThreadsOversubscribed

    def on_run_end(self) -> None:
        from traindoctor.facts.data import runtime as ev

        session = self.session
        if session.uses_cuda or _model_on_a_device(session):
            return  # the compute is on the device: host threads do not slow it this way
        workers, loader = ev.peak_workers(session)
        cores = ev.cores_per_rank(session)
        if workers == 0 or workers > cores:
            return  # no worker beside the threads, or TD104 (workers alone exceed the cores)
        threads = ev.main_threads()
        if threads + workers <= cores:
            return
        spread = ev.compute_spread(session)
        if spread is None:
            return
        median_s, p90_s, steps = spread
        elsewhere = ev.load_elsewhere(session, threads + workers)
        if elsewhere is not None and elsewhere >= max(1.0, 0.5 * int(session.machine_cores)):
            return  # other programs keep the machine busy: they, not this split, may make the steps uneven
        min_spread = float(self.threshold("min_spread", 2.0))
        min_ms = float(self.threshold("min_compute_ms", 2.0))
        min_steps = int(self.threshold("min_steps", 20))
        if steps < min_steps or median_s * 1000 < min_ms or p90_s < min_spread * median_s:
            return  # too few steps, steps too short to tell contention from noise, or even steps
        advice = max(cores - workers, 1)
        self.report(
            f"{threads} intra-op threads and {workers} loader worker "
            f"process{'' if workers == 1 else 'es'} share {cores} CPU "
            f"core{'' if cores == 1 else 's'}, and the steps show it: the slowest tenth of the "
            f"steps' compute takes {p90_s / median_s:.1f}x the median ({p90_s * 1000:.1f} ms vs "
            f"{median_s * 1000:.1f} ms); call `torch.set_num_threads({advice})` or use fewer workers "
            "(`traindoctor tune` measures the best split).",
            evidence={
                "intra_op_threads": threads,
                "concurrent_workers": workers,
                "usable_cores": cores,
                "compute_ms_median": round(median_s * 1000, 3),
                "compute_ms_p90": round(p90_s * 1000, 3),
                "steady_steps": steps,
                "recommended_threads": advice,
            },
            step=session.step or None,
            **(ev.site(loader) if loader is not None and loader.row else {}),
        )


def _model_on_a_device(session: object) -> bool:
    """Whether a watched model keeps its parameters on an accelerator (CUDA, MPS, XPU, ...)."""
    for model in list(getattr(session, "models", None) or ()):
        try:
            param = next(model.parameters(), None)
        except Exception:  # fail-open: a model whose parameters cannot be listed
            continue
        if param is not None and param.device.type != "cpu":
            return True
    return False
