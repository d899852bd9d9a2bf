"""TD104 too-many-workers: more loader worker processes at once than this process has cores."""

from __future__ import annotations

from typing import Any

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class TooManyWorkers(Rule):
    code = "TD104"
    name = "too-many-workers"
    severity = Severity.WARNING
    summary = (
        "More DataLoader worker processes run at the same time than this process has CPU cores; "
        "use at most the cores available to the process, minus one for the training loop."
    )
    gpu_only = False
    static = False
    runtime = True

    what_it_does = """
    At run time, counts the worker processes of every DataLoader whose workers are alive at the
    same time in this process (for example a training loader with persistent workers plus a
    validation loader) and compares the peak with the CPU cores this process may run on
    (`os.sched_getaffinity`). When several local ranks may all use every core (torchrun without
    CPU binding), the cores are divided by the local ranks; that case is reported as TD603
    instead, so one mistake gives one finding.
    """
    why_bad = """
    A worker is a process that needs a core to read, decode and augment samples. With more
    workers than cores they take turns on the same cores and compete with the training process
    itself (Python overhead, kernel launches, the optimizer step), so throughput stops growing
    and often drops, while each extra worker still holds its own copy of the dataset object and
    `prefetch_factor` batches in memory. PyTorch warns about the same situation when a single
    loader asks for more workers than the process's CPU affinity allows.
    """
    example = """
    # a 4-core machine
    train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, num_workers=16)
    """
    use_instead = """
    import os

    workers = max(len(os.sched_getaffinity(0)) - 1, 1)
    train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, num_workers=workers,
                              persistent_workers=True)

    # or
    from traindoctor.recipes import loader_kwargs
    train_loader = DataLoader(train_ds, batch_size=64, shuffle=True, **loader_kwargs(train_ds))
    """
    options = """
    No thresholds: the limit is the cores this process may use (divided by the local ranks when
    they share all cores). The recommendation is the input pipeline model's worker ceiling
    (`traindoctor.facts.data.pipeline.worker_ceiling`, the one `traindoctor tune` keeps to),
    measured on the training loader: the cores the training process leaves free (all of them
    when it mostly waits for data, all but one when it computes about as long as a worker
    loads), divided by the share of a core one worker kept busy (its CPU time, read from
    `/proc` on Linux; a whole core when unknown). Workers that mostly wait on I/O may therefore
    outnumber the cores (up to two per core), and then no finding is reported.
    """
    references = (
        "https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading",
        "https://docs.python.org/3/library/os.html#os.sched_getaffinity",
    )


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class TooManyWorkersMonitor(Monitor):
    """Peak number of live loader worker processes vs the cores this process may use."""

    rule = TooManyWorkers

    def on_run_end(self) -> None:
        from traindoctor.facts.data import runtime as ev

        session = self.session
        loaders = ev.loaders_with_workers(session.loaders)
        peak, peak_info = ev.peak_workers(session)
        if peak_info is None:
            return
        local = max(int(session.local_world_size), 1)
        if local > 1 and session.cpu_count >= session.machine_cores:
            # All ranks share all cores: TD603 (workers x ranks vs machine cores) says it.
            if peak * local > session.machine_cores:
                return
        allowed = ev.cores_per_rank(session)
        if peak <= allowed:
            return
        budget = ev.worker_budget(session)
        if peak <= budget:
            return  # workers that mostly wait (I/O, sleeps): more of them than cores fit
        concurrent = [i for i in loaders if i.max_concurrent_workers > 0]
        cores = "1 CPU core" if allowed == 1 else f"{allowed} CPU cores"
        self.report(
            f"{peak} DataLoader worker processes ran at the same time, more than the {cores} "
            f"this process may use; they compete with each other and with the training "
            f"process. Use at most {budget} worker{'' if budget == 1 else 's'} in total "
            f"({_budget_reason(budget, allowed)}).",
            evidence={
                "concurrent_workers": peak,
                "usable_cores": session.cpu_count,
                "local_world_size": local,
                "cores_per_rank": allowed,
                "recommended_total_workers": budget,
                "loaders": [
                    f"{i.filename.rsplit('/', 1)[-1]}:{i.row} x{i.num_workers}"
                    if i.row
                    else f"{i.dataset_type} x{i.num_workers}"
                    for i in sorted(concurrent, key=lambda i: i.id)
                ],
            },
            step=session.step or None,
            **ev.site(_culprit(concurrent, peak_info)),
        )


def _budget_reason(budget: int, cores: int) -> str:
    """Why the ceiling is what it is (the pipeline model's, the one ``tune`` keeps to)."""
    if budget >= cores:
        return "the training process mostly waits for data, so the workers may use every core"
    if budget == cores - 1:
        return "one core stays for the training process"
    return "the training process needs most of the cores for its own steps"


def _culprit(concurrent: list[Any], peak_info: Any) -> Any:
    """The loader to report: the one with the most workers among those that ran at once (the
    training loader on a tie). The peak is counted when the last loader's ``iter()`` starts, so
    a short evaluation loader started while the training loader's workers run would otherwise
    carry the finding (PyTorch-GAN's cyclegan: ``val_dataloader`` with 1 worker beside
    ``dataloader`` with ``--n_cpu``)."""
    if not concurrent:
        return peak_info
    return max(concurrent, key=lambda i: (i.num_workers, bool(i.feeds_training), i is peak_info, -i.id))
