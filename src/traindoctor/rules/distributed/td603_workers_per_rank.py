"""TD603 workers-per-rank: loader workers x local ranks exceed the machine's cores."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class WorkersPerRank(Rule):
    code = "TD603"
    name = "workers-per-rank"
    severity = Severity.WARNING
    summary = (
        "Loader workers times the ranks on this machine exceed its CPU cores; use at most "
        "`cores // local_ranks - 1` workers per rank."
    )
    gpu_only = False
    static = False
    runtime = True

    what_it_does = """
    In a multi-process launch (`torchrun`, `LOCAL_WORLD_SIZE > 1`), multiplies the peak number of
    loader workers alive at once in each rank by the number of ranks on the machine and compares
    the product with the machine's cores (`os.cpu_count()`). Every rank measures its own loaders;
    the merged report keeps each rank's numbers.
    """
    why_bad = """
    Every rank starts its own workers: eight ranks with sixteen workers each are 128 worker
    processes plus eight training processes. On a machine with fewer cores they take turns, and
    the training processes, which must launch kernels and drive communication on time, lose
    their cores to the workers: steps slow down and become irregular across ranks, so every rank
    waits for the slowest at each gradient all-reduce. Memory grows with each worker too.
    """
    example = """
    # torchrun --nproc_per_node 8 train.py   on a 32-core machine
    loader = DataLoader(ds, batch_size=64, sampler=DistributedSampler(ds), num_workers=16)
    """
    use_instead = """
    import os

    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    workers = max(os.cpu_count() // local_ranks - 1, 1)
    loader = DataLoader(ds, batch_size=64, sampler=DistributedSampler(ds), num_workers=workers)

    # or
    from traindoctor.recipes import loader_kwargs
    loader = DataLoader(ds, batch_size=64, sampler=DistributedSampler(ds),
                        **loader_kwargs(ds, local_world_size=local_ranks))
    """
    options = """
    No thresholds: the limit is the machine's cores; the recommendation is
    `cores // local_ranks - 1` workers per rank. When the launcher binds each rank to its own
    cores (a smaller CPU affinity), TD104 judges each rank against its own cores as well.
    """
    references = (
        "https://pytorch.org/docs/stable/elastic/run.html",
        "https://pytorch.org/docs/stable/data.html#single-and-multi-process-data-loading",
    )


# ---------------------------------------------------------------- runtime half
from traindoctor.runtime.events import Monitor  # noqa: E402


class WorkersPerRankMonitor(Monitor):
    """Loader workers of all local ranks together vs the machine's cores."""

    rule = WorkersPerRank

    def on_run_end(self) -> None:
        from traindoctor.facts.data import runtime as ev

        session = self.session
        local = int(session.local_world_size)
        if local <= 1:
            return
        loaders = ev.loaders_with_workers(session.loaders)
        if not loaders:
            return
        peak_info = max(loaders, key=lambda i: (i.max_concurrent_workers, -i.id))
        per_rank = peak_info.max_concurrent_workers
        cores = int(session.machine_cores)
        if per_rank * local <= cores:
            return
        recommended = max(cores // local - 1, 0)
        self.report(
            f"{local} local ranks x {per_rank} loader workers = {per_rank * local} worker "
            f"processes on a machine with {cores} cores; use at most {recommended} workers per "
            "rank (cores // local ranks - 1).",
            evidence={
                "workers_per_rank": per_rank,
                "local_world_size": local,
                "total_workers": per_rank * local,
                "machine_cores": cores,
                "recommended_num_workers": recommended,
            },
            step=session.step or None,
            **ev.site(peak_info),
        )
