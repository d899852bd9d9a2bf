"""TD203 lr-not-scaled: static and runtime.

The optimizer of the data-parallel model, transformers.AdamW, a batch split per node, the reference batch and LR at run time.
"""

from __future__ import annotations

import torch
from helpers.project_tree import check, rows
from helpers.rule_loops import codes, finding, mlp, train_epoch, vector_loader
from helpers.snippets import check_rows, findings, found

import traindoctor

# ------------------------------------------------------------------ traindoctor check
DDP_SCRIPT = """
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("nccl")
model = DDP(Net().cuda())
baseline = Net()
loader = torch.utils.data.DataLoader(train_set, batch_size=64, sampler=sampler)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
base_opt = torch.optim.SGD(baseline.parameters(), lr=0.1)
{extra}
for x, y in loader:
    criterion(model(x), y).backward()
"""


def test_td203_only_the_optimizer_of_the_data_parallel_model():
    assert check_rows(DDP_SCRIPT.format(extra=""), ["TD203"]) == [("TD203", 10)]


def test_td203_silent_when_lr_or_batch_relate_to_world_size():
    assert check_rows(DDP_SCRIPT.format(extra="args.lr = args.lr * dist.get_world_size()"), ["TD203"]) == []
    assert check_rows(DDP_SCRIPT.format(extra="per_gpu_batch = global_batch // dist.get_world_size()"), ["TD203"]) == []
    assert check_rows(DDP_SCRIPT.format(extra=""), ["TD203"], filename="tests/test_ddp.py") == []


def test_td203_silent_for_single_process_script():
    src = """
    import argparse
    import torch
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for x, y in loader:
        criterion(model(x), y).backward()
    """
    assert check_rows(src, ["TD203"]) == []


ACCELERATE = """
import argparse
from accelerate import Accelerator
{import_line}

parser = argparse.ArgumentParser()
parser.add_argument("--learning_rate", type=float, default=5e-5)
parser.add_argument("--gradient_accumulation_steps", type=int, default=4)
args = parser.parse_args()
accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
model = build()
optimizer = {ctor}(model.parameters(), lr=args.learning_rate)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    with accelerator.accumulate(model):
        accelerator.backward(model(**batch).loss)
        optimizer.step()
        optimizer.zero_grad()
"""


ADAMW_SPELLINGS = [
    ("import torch", "torch.optim.AdamW"),
    ("from transformers import AdamW", "AdamW"),
    ("import transformers", "transformers.AdamW"),
    ("from transformers.optimization import AdamW as HFAdamW", "HFAdamW"),
]


def test_td203_treats_transformers_adamw_like_torch_adamw() -> None:
    for import_line, ctor in ADAMW_SPELLINGS:
        src = ACCELERATE.replace("{import_line}", import_line).replace("{ctor}", ctor)
        hits = findings(src, ["TD203"])
        assert [(f.code, f.location.row) for f in hits] == [("TD203", 11)], ctor
        assert "`args.learning_rate` is used unchanged" in hits[0].message


def test_td203_stays_silent_for_transformers_adamw_when_the_lr_is_scaled() -> None:
    src = ACCELERATE.replace("{import_line}", "from transformers import AdamW").replace("{ctor}", "AdamW")
    src = src.replace(
        "lr=args.learning_rate)",
        "lr=args.learning_rate * args.gradient_accumulation_steps)",
    )
    assert found(src, ["TD203"]) == []


PER_NODE = """
import argparse
import torch
import torch.multiprocessing as mp

parser = argparse.ArgumentParser()
parser.add_argument("--lr", default=0.1, type=float)
parser.add_argument("--batch-size", default=256, type=int, help="total batch size of all GPUs on the node")
parser.add_argument("--world-size", default=1, type=int, help="number of nodes")


def main():
    args = parser.parse_args()
    ngpus_per_node = torch.cuda.device_count()
    args.world_size = ngpus_per_node * args.world_size
    mp.spawn(main_worker, nprocs=ngpus_per_node, args=(ngpus_per_node, args))


def main_worker(gpu, ngpus_per_node, args):
    torch.distributed.init_process_group("nccl", world_size=args.world_size, rank=gpu)
    model = torch.nn.parallel.DistributedDataParallel(Net().cuda(gpu), device_ids=[gpu])
    args.batch_size = int(args.batch_size / ngpus_per_node)
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=0.9)
    for epoch in range(90):
        adjust_learning_rate(optimizer, epoch, args)
        for x, y in loader:
            loss = criterion(model(x.cuda()), y.cuda())
            loss.backward()
            optimizer.step()


def adjust_learning_rate(optimizer, epoch, args):
    lr = args.lr * (0.1 ** (epoch // 30))
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
"""


def test_batch_split_per_node_grows_with_the_nodes_and_a_schedule_is_no_scaling(tmp_path):
    result = check(tmp_path, {"main.py": PER_NODE}, "main.py", ["TD203"])
    assert rows(result) == [("TD203", 22)]
    assert "one node's GPUs only (line 21)" in result.findings[0].message
    # divided by the whole world size: the global batch is what the user asked for
    world = PER_NODE.replace("args.batch_size / ngpus_per_node", "args.batch_size / args.world_size")
    assert rows(check(tmp_path, {"main.py": world}, "main.py", ["TD203"])) == []
    # the schedule scales the LR with the batch: the author thought about it
    scaled = PER_NODE.replace("lr = args.lr * (0.1", "lr = args.lr * args.batch_size / 256 * (0.1")
    assert rows(check(tmp_path, {"main.py": scaled}, "main.py", ["TD203"])) == []


# ------------------------------------------------------------------ traindoctor run
REFERENCE = {"reference_batch": 16, "reference_lr": 0.1}


def test_td203_effective_batch_grew_without_lr_scaling() -> None:
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    with traindoctor.watch(select=["TD203"], thresholds=REFERENCE) as doctor:
        train_epoch(model, opt, vector_loader(64))
    f = finding(doctor, "TD203")
    ev = f.evidence
    assert ev["effective_batch"] == 64 and ev["batch_source"] == "loader"
    assert ev["scaling_rule"] == "linear" and ev["recommended_lr"] == 0.4
    assert "0.4" in f.message


def test_td203_adam_gets_square_root_rule() -> None:
    model = mlp()
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD203"], thresholds=REFERENCE) as doctor:
        train_epoch(model, opt, vector_loader(64))
    ev = finding(doctor, "TD203").evidence
    assert ev["scaling_rule"] == "sqrt" and abs(ev["recommended_lr"] - 0.2) < 1e-12


def test_td203_silent_when_scaled_same_batch_or_no_reference() -> None:
    model = mlp()
    scaled = torch.optim.SGD(model.parameters(), lr=0.4)
    same = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD203"], thresholds=REFERENCE) as a:
        train_epoch(model, scaled, vector_loader(64))
    with traindoctor.watch(select=["TD203"], thresholds=REFERENCE) as b:
        train_epoch(model, same, vector_loader(16))
    with traindoctor.watch(select=["TD203"]) as c:
        train_epoch(model, same, vector_loader(64))
    assert codes(a) == [] and codes(b) == [] and codes(c) == []


SCRIPT = """
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(192, 8), torch.randint(0, 2, (192,)))
for x, y in DataLoader(data, batch_size=64):
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()
"""


def test_cli_reference_options_reach_td203(tmp_path) -> None:
    import json

    from traindoctor.doctor.cli import main, parse_args

    opts = parse_args(["--reference-batch", "16", "--reference-lr=0.1", "--no-decay", "bias,bn", "x.py"])
    assert opts.thresholds == {"reference_batch": 16, "reference_lr": 0.1, "no_decay": "bias,bn"}
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "report.json"
    rc = main(
        [
            "--select",
            "TD203",
            "--reference-batch",
            "16",
            "--reference-lr",
            "0.1",
            "--output-format",
            "json",
            "-o",
            str(out),
            str(script),
        ]
    )
    assert rc == 0
    [f] = json.loads(out.read_text())["findings"]
    assert f["code"] == "TD203" and f["evidence"]["effective_batch"] == 64
