"""TD103 workers-respawned: static and runtime.

The fix, the worker count quoted in the message, loaders iterated through helpers; at run time the re-spawns measured.
"""

from __future__ import annotations

import pytest
from helpers.data_loops import SleepyDataset, slow_worker_start, train
from helpers.project_tree import check, rows
from helpers.rule_loops import codes, finding
from helpers.scripts import PARSER
from helpers.snippets import data_check, findings, found
from torch.utils.data import DataLoader

import traindoctor

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")


# ------------------------------------------------------------------ traindoctor check
def test_td103_fix_is_unsafe_when_loop_changes_dataset():
    src = """
    from torch.utils.data import DataLoader
    loader = DataLoader(train_ds, batch_size=64, num_workers=4)
    for epoch in range(10):
        train_ds.set_epoch(epoch)
        for x in loader:
            model(x).sum().backward()
    """
    (finding,) = data_check(src, ["TD103"]).findings
    assert finding.fix is not None and finding.fix.applicability == "unsafe"
    assert data_check(src, ["TD103"], fix=True).fixed_source is None
    unsafe = data_check(src, ["TD103"], fix=True, unsafe_fixes=True).fixed_source
    assert "num_workers=4, persistent_workers=True)" in unsafe


def test_td103_does_not_quote_a_count_that_the_script_changes() -> None:
    plain = findings(PARSER.replace("{reassign}", "pass"), ["TD103"])
    assert [(f.code, f.location.row) for f in plain] == [("TD103", 11)]
    assert "its 32 worker processes are restarted" in plain[0].message
    src = PARSER.replace("{reassign}", "args.workers = int((args.workers + ngpus_per_node - 1) / ngpus_per_node)")
    divided = findings(src, ["TD103"])
    assert [(f.code, f.location.row) for f in divided] == [("TD103", 11)]
    assert "and its worker processes are restarted each time" in divided[0].message
    assert "32" not in divided[0].message


LOG_EVERY = """
import torch
import utils

def train_one_epoch(model, optimizer, data_loader):
    metric_logger = utils.MetricLogger(delimiter="  ")
    for it, (x, y) in enumerate(metric_logger.log_every(data_loader, 10, "Epoch:")):
        model(x).sum().backward()
        optimizer.step()

def main(args):
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data_loader = torch.utils.data.DataLoader(dataset, batch_size=64, num_workers=8{persistent})
    for epoch in range(90):
        train_one_epoch(model, optimizer, data_loader)
"""


def test_td103_sees_a_loader_iterated_through_log_every() -> None:
    hits = findings(LOG_EVERY.replace("{persistent}", ""), ["TD103"])
    assert [(f.code, f.location.row) for f in hits] == [("TD103", 13)]
    assert "loop at line 14 and its 8 worker processes" in hits[0].message
    assert found(LOG_EVERY.replace("{persistent}", ", persistent_workers=True"), ["TD103"]) == []


def test_cpu_count_workers_are_workers(tmp_path):
    src = """
    import os
    import torch

    workers = os.cpu_count()
    loader = torch.utils.data.DataLoader(ds, batch_size=128, shuffle=True, num_workers=workers, pin_memory=True)
    for epoch in range(5):
        for x in loader:
            model(x.cuda()).sum().backward()
    """
    result = check(tmp_path, {"train.py": src}, "train.py", ["TD103"])
    assert rows(result) == [("TD103", 5)]
    assert "its worker processes" in result.findings[0].message  # how many is not known


# ------------------------------------------------------------------ traindoctor run
def test_td103_fires_when_workers_restart_every_epoch() -> None:
    with traindoctor.watch(select=["TD103"]) as doctor:
        loader = DataLoader(SleepyDataset(8), batch_size=4, num_workers=1, worker_init_fn=slow_worker_start)
        train(loader, epochs=3)
    f = finding(doctor, "TD103")
    assert f.evidence["respawns"] == 2 and f.evidence["epochs"] == 3
    assert f.evidence["startup_s_per_epoch"] >= 0.1  # worker_init_fn sleeps 0.15 s
    assert "persistent_workers=True" in f.message


def test_td103_silent_with_persistent_workers() -> None:
    with traindoctor.watch(select=["TD103"]) as doctor:
        loader = DataLoader(
            SleepyDataset(8), batch_size=4, num_workers=1, worker_init_fn=slow_worker_start, persistent_workers=True
        )
        train(loader, epochs=3)
    assert codes(doctor) == []
    info = doctor.loaders[0]
    assert (info.epochs, info.spawns) == (3, 1)
