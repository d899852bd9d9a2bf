"""TD105 data-bound: runtime.

Workers too slow to keep up, and eval-only loaders that are not the input pipeline.
"""

from __future__ import annotations

import pytest
from helpers.data_loops import MiniTrainer, SleepyDataset, evaluate_fresh_loader, fast_dataset, train
from helpers.rule_loops import codes, finding
from torch import nn
from torch.utils.data import DataLoader

import traindoctor

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


def test_td105_fires_when_workers_cannot_keep_up() -> None:
    with traindoctor.watch(select=["TD105"], cpu_count=4, machine_cores=4) as doctor:
        loader = DataLoader(SleepyDataset(40, delay_s=0.01), batch_size=4, num_workers=1)
        train(loader)
    f = finding(doctor, "TD105")
    ev = f.evidence
    assert ev["num_workers"] == 1
    assert ev["data_wait_share"] > 0.2 and ev["wait_ms_per_batch"] > 5
    assert ev["fetch_ms_per_batch_per_worker"] >= 30  # 4 x 10 ms of sleep per batch
    assert ev["recommended_num_workers"] > 1
    assert "traindoctor tune" in (f.help or "")


def test_td105_silent_when_workers_keep_up() -> None:
    with traindoctor.watch(select=["TD105", "TD102"]) as doctor:
        loader = DataLoader(SleepyDataset(40, delay_s=0.001), batch_size=4, num_workers=2)
        train(loader, step_sleep_s=0.02)
    assert codes(doctor) == []
    assert doctor.loaders[0].batches == 10


def test_td105_silent_on_an_eval_only_loader_with_a_slow_worker() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def at_end(trainer: MiniTrainer) -> None:
        if trainer.iter_num == trainer.iters - 1:
            evaluate_fresh_loader(model, delay_s=0.01, max_batches=None, workers=1)

    with traindoctor.watch(select=["TD105"], cpu_count=4, machine_cores=4) as doctor:
        MiniTrainer(model, fast_dataset(), at_end, iters=10).run()
    assert codes(doctor) == []
    assert [info.feeds_training for info in doctor.loaders] == [True, False]
