"""A DataLoader only iterated for evaluation is not the training input pipeline (issue 9, seen on
minGPT's adder project): TD102/TD105 judge only loaders whose batches fed ``backward()`` or an
optimizer step. The loops are shaped like the real one: a trainer class whose loop calls a
callback every N iterations, and the callback builds a fresh slow loader and evaluates under
``no_grad`` (in full, or breaking off after a few batches)."""

from __future__ import annotations

import pytest
import torch
from data_loops import SleepyDataset, codes, finding
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import traindoctor

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


class MiniTrainer:
    """A trainer that owns the training loader and calls back after every iteration."""

    def __init__(self, model: nn.Module, train_set, callback, iters: int, workers: int = 0) -> None:
        self.model, self.callback, self.iters = model, callback, iters
        self.loader = DataLoader(train_set, batch_size=8, shuffle=True, num_workers=workers)
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        self.iter_num = 0

    def run(self) -> None:
        it = iter(self.loader)
        while self.iter_num < self.iters:
            try:
                x, y = next(it)
            except StopIteration:
                it = iter(self.loader)
                x, y = next(it)
            loss = nn.functional.mse_loss(self.model(x), y)
            self.model.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
            self.callback(self)
            self.iter_num += 1


def _fast_set() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(64, 8, generator=g), torch.randn(64, 1, generator=g))


def _evaluate(model: nn.Module, delay_s: float, max_batches: int | None, workers: int = 0) -> float:
    loader = DataLoader(SleepyDataset(48, delay_s=delay_s), batch_size=4, num_workers=workers)  # eval
    total = 0.0
    with torch.no_grad():
        for b, (x, y) in enumerate(loader):
            total += nn.functional.mse_loss(model(x), y).item()
            if max_batches is not None and b + 1 >= max_batches:
                break
    return total


@pytest.mark.parametrize("max_batches", [None, 8])
def test_td102_silent_on_a_slow_eval_only_loader(max_batches) -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def every_10(trainer: MiniTrainer) -> None:
        if trainer.iter_num % 10 == 0:
            model.eval()
            _evaluate(model, delay_s=0.003, max_batches=max_batches)
            model.train()

    with traindoctor.watch(select=["TD102"], cpu_count=4, machine_cores=4) as doctor:
        MiniTrainer(model, _fast_set(), every_10, iters=25).run()
    assert codes(doctor) == []
    by_role = {info.feeds_training: info for info in doctor.loaders if info.batches}
    assert by_role[True].batches == 25  # the training loader, one batch per step
    evals = [info for info in doctor.loaders if not info.feeds_training]
    assert len(evals) == 3 and all(info.batches >= 8 for info in evals)  # iterations 0, 10, 20
    # the same eval loader, were it judged, is slow enough for TD102: the silence is by role
    info = evals[0]
    assert info.wait_s / info.active_s > 0.2 and 1000 * info.wait_s / info.batches > 5


def test_td102_still_fires_on_the_slow_training_loader_beside_an_eval_loader() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def every_10(trainer: MiniTrainer) -> None:
        if trainer.iter_num % 10 == 0:
            _evaluate(model, delay_s=0.0, max_batches=2)

    with traindoctor.watch(select=["TD102"], cpu_count=4, machine_cores=4) as doctor:
        trainer = MiniTrainer(model, SleepyDataset(48, delay_s=0.003), every_10, iters=15)
        trainer.run()
    f = finding(doctor, "TD102")
    assert f.evidence["batches"] == 15
    assert f.location.row == MiniTrainer.__init__.__code__.co_firstlineno + 2  # the trainer's loader


def test_td105_silent_on_an_eval_only_loader_with_a_slow_worker() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def at_end(trainer: MiniTrainer) -> None:
        if trainer.iter_num == trainer.iters - 1:
            _evaluate(model, delay_s=0.01, max_batches=None, workers=1)

    with traindoctor.watch(select=["TD105"], cpu_count=4, machine_cores=4) as doctor:
        MiniTrainer(model, _fast_set(), at_end, iters=10).run()
    assert codes(doctor) == []
    assert [info.feeds_training for info in doctor.loaders] == [True, False]


def test_a_run_that_never_trains_still_judges_its_loader() -> None:
    """No backward, no optimizer step (a loading benchmark): every loader is the pipeline."""
    with traindoctor.watch(select=["TD102"], cpu_count=4, machine_cores=4) as doctor:
        for x, y in DataLoader(SleepyDataset(48, delay_s=0.003), batch_size=4):
            torch.tanh(x).sum()
    assert codes(doctor) == ["TD102"]
