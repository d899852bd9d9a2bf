"""TD604 ddp-without-distributed-sampler: static and runtime (torchrun, gloo, 2 ranks)."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import checked_rows
from helpers.run_cli import run_findings, torchrun_json
from helpers.snippets import check_findings, check_rows

SRC = """
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader

model = DDP(net)
train_loader = DataLoader(train_set, batch_size=16, shuffle=True{extra})
val_loader = DataLoader(val_set, batch_size=16)
for x, y in train_loader:
    criterion(model(x), y).backward()
"""


# ------------------------------------------------------------------ traindoctor check
def test_td604_training_loader_without_sampler_under_ddp() -> None:
    assert check_rows(SRC.format(extra=""), ["TD604"]) == [("TD604", 7)]
    (found,) = check_findings(SRC.format(extra=""), ["TD604"])
    assert "`DistributedSampler`" in found.message
    assert check_rows(SRC.format(extra=", sampler=make_sampler(train_set)"), ["TD604"]) == []
    no_ddp = SRC.format(extra="").replace("DDP(net)", "net")
    assert check_rows(no_ddp, ["TD604"]) == []


def test_td604_multi_file_project(tmp_path: Path) -> None:
    files = {
        "data.py": """
            from torch.utils.data import DataLoader, DistributedSampler

            def make_loader(ds):
                return DataLoader(ds, batch_size=16, sampler=DistributedSampler(ds))
            """,
        "train.py": """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from data import make_loader

            model = DDP(net)
            for x, y in make_loader(train_set):
                criterion(model(x), y).backward()
            """,
    }
    # the loader is built (with its sampler) in data.py: train.py is not reported
    assert checked_rows(tmp_path, files, "train.py", ["TD604"]) == []
    assert checked_rows(tmp_path, files, "data.py", ["TD604"]) == []


# ------------------------------------------------------------------ traindoctor run / watch() under torchrun
SCRIPT = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
loader = DataLoader(data, batch_size=8, shuffle=True)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
"""

WATCHED = """
import json
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
import traindoctor

def train(distributed):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sampler = DistributedSampler(data, shuffle=True) if distributed else None
    loader = DataLoader(data, batch_size=8, shuffle=not distributed, sampler=sampler)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()

dist.init_process_group("gloo")
out = {}
for distributed in (False, True):
    with traindoctor.watch(select=["TD604"]) as doctor:
        train(distributed)
    out[str(distributed)] = [(f.code, f.evidence) for f in doctor.findings]
with open(f"result-{dist.get_rank()}.json", "w") as fh:
    json.dump(out, fh)
dist.destroy_process_group()
"""


def test_td604_through_traindoctor_run_under_torchrun(tmp_path: Path) -> None:
    found = [f for f in run_findings(tmp_path, SCRIPT, "TD604", ranks=2) if f["origin"] == "runtime"]
    assert [(f["code"], f["evidence"]["world_size"], f["evidence"]["ranks"]) for f in found] == [("TD604", 2, [0, 1])]


def test_td604_watch_under_torchrun_positive_and_healthy_twin(tmp_path: Path) -> None:
    for rank, result in torchrun_json(tmp_path, WATCHED).items():
        (code, evidence), *more = result["False"]
        assert code == "TD604" and not more, rank
        assert evidence["identical_batches"] == 3 and evidence["world_size"] == 2
        assert result["True"] == [], rank  # each rank its own share
