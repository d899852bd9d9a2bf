"""TD605 find-unused-parameters-needless: static and runtime (torchrun, gloo, 2 ranks)."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import checked_rows
from helpers.run_cli import run_findings, torchrun_json
from helpers.snippets import check_findings, check_rows

SRC = """
import torch

model = torch.nn.parallel.DistributedDataParallel(net, find_unused_parameters={flag})
"""


# ------------------------------------------------------------------ traindoctor check
def test_td605_static_at_the_keyword_asks_to_check() -> None:
    assert check_rows(SRC.format(flag=True), ["TD605"]) == [("TD605", 4)]
    (found,) = check_findings(SRC.format(flag=True), ["TD605"])
    assert found.location.column == 79 and "unless some parameters really get no gradient" in found.message
    assert check_rows(SRC.format(flag=False), ["TD605"]) == []
    assert check_rows(SRC.format(flag=True), ["TD605"], filename="tests/test_ddp.py") == []


def test_td605_multi_file_project(tmp_path: Path) -> None:
    files = {
        "dist_utils.py": """
            from torch.nn.parallel import DistributedDataParallel

            def wrap(model, rank):
                return DistributedDataParallel(model, device_ids=[rank], find_unused_parameters=True)
            """,
        "train.py": """
            from dist_utils import wrap

            model = wrap(net, rank)
            """,
    }
    assert checked_rows(tmp_path, files, "dist_utils.py", ["TD605"]) == [("TD605", 4)]
    assert checked_rows(tmp_path, files, "train.py", ["TD605"]) == []


# ------------------------------------------------------------------ traindoctor run / watch() under torchrun
SCRIPT = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)), find_unused_parameters=True)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(6):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
"""

WATCHED = """
import json
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
import traindoctor

class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 1), nn.Linear(4, 1)

    def forward(self, x, both):
        h = self.body(x)
        return self.a(h) + self.b(h) if both else self.a(h)

def train(both):
    torch.manual_seed(0)
    model = DDP(TwoHeads(), find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(6):
        opt.zero_grad()
        model(torch.randn(8, 4), both).pow(2).mean().backward()
        opt.step()

dist.init_process_group("gloo")
out = {}
for both in (True, False):
    with traindoctor.watch(select=["TD605"]) as doctor:
        train(both)
    out[str(both)] = [(f.code, f.evidence) for f in doctor.findings]
with open(f"result-{dist.get_rank()}.json", "w") as fh:
    json.dump(out, fh)
dist.destroy_process_group()
"""


def test_td605_through_traindoctor_run_under_torchrun(tmp_path: Path) -> None:
    found = [f for f in run_findings(tmp_path, SCRIPT, "TD605", ranks=2) if f["origin"] == "runtime"]
    assert [(f["code"], f["severity"], f["evidence"]["parameters"]) for f in found] == [("TD605", "warning", 4)]


def test_td605_watch_under_torchrun_positive_and_healthy_twin(tmp_path: Path) -> None:
    for rank, result in torchrun_json(tmp_path, WATCHED).items():
        (code, evidence), *more = result["True"]  # both heads used: the search finds nothing
        assert code == "TD605" and not more, rank
        assert evidence["parameters"] == 6 and evidence["sampled_steps"] == evidence["steps_all_used"] == 5
        assert result["False"] == [], rank  # head `b` never gets a gradient: the flag is needed
