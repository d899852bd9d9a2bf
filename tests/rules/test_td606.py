"""TD606 accumulation-without-no-sync: static and runtime (torchrun, gloo, 2 ranks)."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import checked_rows
from helpers.run_cli import run_findings, torchrun_json
from helpers.snippets import check_findings, check_rows

LOOP = """
import torch

model = torch.nn.parallel.DistributedDataParallel(net)
for i, (x, y) in enumerate(loader):
    {sync}
    (criterion(model(x), y) / accum).backward()
    if (i + 1) % accum == 0:
        optimizer.step()
        optimizer.zero_grad()
"""


# ------------------------------------------------------------------ traindoctor check
def test_td606_accumulation_under_ddp_without_no_sync() -> None:
    assert check_rows(LOOP.format(sync="pass"), ["TD606"]) == [("TD606", 7)]
    (found,) = check_findings(LOOP.format(sync="pass"), ["TD606"])
    assert "`model.no_sync()`" in found.message
    assert check_rows(LOOP.format(sync="model.require_backward_grad_sync = (i + 1) % accum == 0"), ["TD606"]) == []
    no_ddp = LOOP.format(sync="pass").replace("torch.nn.parallel.DistributedDataParallel(net)", "net")
    assert check_rows(no_ddp, ["TD606"]) == []


SWIN_STYLE = """
import torch

model = torch.nn.parallel.DistributedDataParallel(net)
for idx, (x, y) in enumerate(loader):
    loss = criterion(model(x), y)
    if config.ACCUMULATION_STEPS > 1:
        loss = loss / config.ACCUMULATION_STEPS
        if config.AMP:
            with amp.scale_loss(loss, optimizer) as scaled:
                scaled.backward()
        else:
            loss.backward()
        if (idx + 1) % config.ACCUMULATION_STEPS == 0:
            optimizer.step()
            optimizer.zero_grad()
    else:
        optimizer.zero_grad()
        if config.AMP:
            with amp.scale_loss(loss, optimizer) as scaled:
                scaled.backward()
        else:
            loss.backward()
        optimizer.step()
"""


def test_td606_one_finding_per_accumulation_step_and_none_on_the_path_that_steps_every_batch() -> None:
    # the AMP and plain backwards of the accumulating arm are one mistake (one no_sync fixes
    # both); the arm taken without accumulation steps after every backward: nothing to sync
    assert check_rows(SWIN_STYLE, ["TD606"]) == [("TD606", 11)]


def test_td606_and_td207_a_backward_followed_by_its_optimizer_step_accumulates_nothing() -> None:
    # TD3/DDPG shape: the critic steps after every backward; only the actor's update is delayed
    src = """
    import torch

    actor = torch.nn.parallel.DistributedDataParallel(actor_net)
    for step in range(total_steps):
        q_loss = critic_loss(batch)
        q_optimizer.zero_grad()
        q_loss.backward()
        q_optimizer.step()
        if step % policy_frequency == 0:
            actor_loss = -critic(obs, actor(obs)).mean()
            actor_optimizer.zero_grad()
            actor_loss.backward()
            actor_optimizer.step()
    """
    assert check_rows(src, ["TD606", "TD207"]) == []


def test_td606_multi_file_project(tmp_path: Path) -> None:
    files = {
        "engine.py": """
            def train_one_epoch(model, loader, optimizer, accum):
                for i, (x, y) in enumerate(loader):
                    (model(x).mean() / accum).backward()
                    if (i + 1) % accum == 0:
                        optimizer.step()
            """,
        "train.py": """
            from torch.nn.parallel import DistributedDataParallel as DDP
            from engine import train_one_epoch

            model = DDP(net)
            train_one_epoch(model, loader, optimizer, 4)
            """,
    }
    # the loop lives in engine.py, which never sees DDP: the rule needs both in one file
    assert checked_rows(tmp_path, files, "engine.py", ["TD606"]) == []
    assert checked_rows(tmp_path, files, "train.py", ["TD606"]) == []
    files["train.py"] = files["train.py"].replace(
        "train_one_epoch(model, loader, optimizer, 4)",
        "for i, (x, y) in enumerate(loader):\n"
        "                (model(x).mean() / 4).backward()\n"
        "                if (i + 1) % 4 == 0:\n"
        "                    optimizer.step()",
    )
    assert checked_rows(tmp_path, files, "train.py", ["TD606"]) == [("TD606", 6)]


# ------------------------------------------------------------------ traindoctor run / watch() under torchrun
SCRIPT = """
import contextlib
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
accum = 2
for i in range(8):
    stepping = (i + 1) % accum == 0
    with contextlib.nullcontext() if stepping else {context}:
        loss = model(torch.randn(8, 4)).pow(2).mean() / accum
        loss.backward()
    if stepping:
        opt.step()
        opt.zero_grad()
dist.destroy_process_group()
"""

WATCHED = """
import contextlib, json, os
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import traindoctor

def train(no_sync):
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(12):
        stepping = (i + 1) % 3 == 0
        with model.no_sync() if (no_sync and not stepping) else contextlib.nullcontext():
            (model(torch.randn(8, 4)).pow(2).mean() / 3).backward()
        if stepping:
            opt.step()
            opt.zero_grad()

dist.init_process_group("gloo")
out = {}
for no_sync in (False, True):
    with traindoctor.watch(select=["TD606"]) as doctor:
        train(no_sync)
    out[str(no_sync)] = [(f.code, f.evidence) for f in doctor.findings]
with open(f"result-{dist.get_rank()}.json", "w") as fh:
    json.dump(out, fh)
dist.destroy_process_group()
"""


def test_td606_through_traindoctor_run_under_torchrun(tmp_path: Path) -> None:
    (found,) = run_findings(tmp_path, SCRIPT.format(context="contextlib.nullcontext()"), "TD606", ranks=2)
    assert found["code"] == "TD606" and found["evidence"]["ranks"] == [0, 1]
    assert found["evidence"]["allreduce_rounds_per_step"] == 2 and found["evidence"]["world_size"] == 2


def test_td606_watch_under_torchrun_positive_and_healthy_twin(tmp_path: Path) -> None:
    for rank, result in torchrun_json(tmp_path, WATCHED).items():
        (code, evidence), *more = result["False"]
        assert code == "TD606" and not more, rank
        assert evidence["backward_per_step"] == 3 and evidence["sampled_steps"] == 3
        assert result["True"] == [], rank  # no_sync() on the micro-steps
