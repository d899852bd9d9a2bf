"""TD203 on project shapes: the world size read through a project helper, a total batch the user
declares (accumulation derived from it), scaling in an opt-in branch that is off by default,
accumulation read from a config object."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, checked_rows

UTILS = """
    import torch.distributed as dist

    def is_dist_avail_and_initialized():
        return dist.is_available() and dist.is_initialized()

    def get_world_size():
        if not is_dist_avail_and_initialized():
            return 1
        return dist.get_world_size()

    def init_distributed_mode(args):
        dist.init_process_group("nccl")
    """

MAIN = """
    import argparse
    import torch
    import utils

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    def main(args):
        utils.init_distributed_mode(args)
        model = torch.nn.parallel.DistributedDataParallel(Net().cuda())
        {scale}
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
        for epoch in range(300):
            for x, y in loader:
                criterion(model(x), y).backward()
                optimizer.step()
    """


def test_world_size_from_a_project_helper_relates_the_lr_to_the_batch(tmp_path: Path) -> None:
    scaled = MAIN.format(scale="args.lr = args.lr * args.batch_size * utils.get_world_size() / 512.0")
    assert checked_rows(tmp_path / "a", {"utils.py": UTILS, "main.py": scaled}, "main.py", ["TD203"]) == []
    plain = MAIN.format(scale="pass")
    result = check(tmp_path / "b", {"utils.py": UTILS, "main.py": plain}, "main.py", ["TD203"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD203", 14)]
    assert "multiplied by the world size" in result.findings[0].message


ACCELERATE = """
    import argparse
    import torch
    from accelerate import Accelerator

    parser = argparse.ArgumentParser()
    parser.add_argument("--learning_rate", type=float, default=1e-4)
    parser.add_argument("--train_batch_size", type=int, default=16)
    parser.add_argument("--gradient_accumulation_steps", type=int, default=4)
    parser.add_argument("--lr_warmup_steps", type=int, default=500)
    parser.add_argument(
        "--scale_lr", action="{action}", help="Scale the learning rate by the number of GPUs, accumulation and batch size."
    )
    args = parser.parse_args()
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
    if args.scale_lr:
        args.learning_rate = (
            args.learning_rate * args.gradient_accumulation_steps * args.train_batch_size * accelerator.num_processes
        )
    optimizer = torch.optim.AdamW(unet.parameters(), lr=args.learning_rate)
    lr_scheduler = get_scheduler(optimizer, num_warmup_steps=args.lr_warmup_steps * args.gradient_accumulation_steps)
    unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
    for batch in loader:
        with accelerator.accumulate(unet):
            accelerator.backward(unet(batch).loss)
            optimizer.step()
    """


def test_lr_scaling_in_an_opt_in_branch_off_by_default_is_no_scaling(tmp_path: Path) -> None:
    result = check(tmp_path / "a", {"train.py": ACCELERATE.format(action="store_true")}, "train.py", ["TD203"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD203", 19)]
    assert "`args.learning_rate` is used unchanged" in result.findings[0].message
    # on by default (``store_false``): the run scales its LR
    assert (
        checked_rows(tmp_path / "b", {"train.py": ACCELERATE.format(action="store_false")}, "train.py", ["TD203"]) == []
    )


TOTAL = """
    import argparse
    import os
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--total_batch_size", type=int, default=512)
    args = parser.parse_args()
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("nccl")
    args.gradient_accumulation = {derive}
    model = torch.nn.parallel.DistributedDataParallel(Net().cuda())
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    for step, (x, y) in enumerate(loader):
        loss = criterion(model(x), y) / args.gradient_accumulation
        loss.backward()
        if (step + 1) % args.gradient_accumulation == 0:
            optimizer.step()
            optimizer.zero_grad()
    """


def test_accumulation_derived_from_a_declared_total_batch(tmp_path: Path) -> None:
    declared = TOTAL.format(derive="args.total_batch_size // (args.batch_size * world_size)")
    assert checked_rows(tmp_path / "a", {"train.py": declared}, "train.py", ["TD203"]) == []
    # divided by the per-process batch only: the total still grows with the processes
    per_process = TOTAL.format(derive="args.total_batch_size // args.batch_size")
    assert checked_rows(tmp_path / "b", {"train.py": per_process}, "train.py", ["TD203"]) == [("TD203", 15)]
    # an accumulation count the user sets directly
    direct = TOTAL.format(derive="8")
    assert checked_rows(tmp_path / "c", {"train.py": direct}, "train.py", ["TD203"]) == [("TD203", 15)]


def test_single_device_batch_declared_with_micro_batches(tmp_path: Path) -> None:
    script = """
        import torch

        learning_rate = 3e-4
        batch_size = 128
        micro_batch_size = 4
        gradient_accumulation_iters = {derive}

        def train(model, loader):
            optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
            for i, (x, y) in enumerate(loader):
                loss = criterion(model(x), y) / gradient_accumulation_iters
                loss.backward()
                if (i + 1) % gradient_accumulation_iters == 0:
                    optimizer.step()
                    optimizer.zero_grad()
        """
    derived = script.format(derive="batch_size // micro_batch_size")
    assert checked_rows(tmp_path / "a", {"finetune.py": derived}, "finetune.py", ["TD203"]) == []
    assert checked_rows(tmp_path / "b", {"finetune.py": script.format(derive="32")}, "finetune.py", ["TD203"]) == [
        ("TD203", 9)
    ]


def test_accumulation_read_from_a_config_object(tmp_path: Path) -> None:
    script = """
        import torch

        def train(cfg, model, loader):
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            for i, (x, y) in enumerate(loader):
                (criterion(model(x), y) / cfg.TRAIN.ACCUM_STEPS).backward()
                if (i + 1) % cfg.TRAIN.ACCUM_STEPS == 0:
                    optimizer.step()
                    optimizer.zero_grad()
        """
    result = check(tmp_path, {"engine.py": script}, "engine.py", ["TD203"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD203", 4)]
    assert "gradient accumulation multiplies the batch" in result.findings[0].message


FACTORY = """
    import torch

    def create_optimizer(args, model):
        kwargs = dict(lr=args.lr, weight_decay=args.weight_decay)
        if args.eps is not None:
            kwargs["eps"] = args.eps
        name = args.opt.lower()
        if name == "sgd":
            kwargs.pop("eps", None)
            return torch.optim.SGD(model.parameters(), momentum=0.9, **kwargs)
        elif name == "adafactor":
            kwargs["lr"] = None
            return Adafactor(model.parameters(), **kwargs)
        return torch.optim.AdamW(model.parameters(), **kwargs)
    """

DRIVER = """
    import argparse
    import torch
    import utils
    from optim_factory import create_optimizer
    from engine import train_one_epoch

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1.5e-4)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--weight_decay", type=float, default=0.05)
    parser.add_argument("--eps", type=float, default=None)
    parser.add_argument("--opt", default="adamw")

    def main(args):
        utils.init_distributed_mode(args)
        model = Net().cuda()
        model = torch.nn.parallel.DistributedDataParallel(model)
        model_without_ddp = model.module
        {scale}
        optimizer = create_optimizer(args, model_without_ddp)
        for epoch in range(100):
            train_one_epoch(model, loader, optimizer)

    if __name__ == "__main__":
        main(parser.parse_args())
    """

ENGINE = """
    def train_one_epoch(model, loader, optimizer):
        for x in loader:
            model(x).mean().backward()
            optimizer.step()
    """


def test_lr_of_an_optimizer_built_by_a_project_helper_from_args(tmp_path: Path) -> None:
    files = {"utils.py": UTILS, "optim_factory.py": FACTORY, "engine.py": ENGINE}
    plain = DRIVER.format(scale="pass")
    result = check(tmp_path / "a", {**files, "main.py": plain}, "main.py", ["TD203"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD203", 20)]
    finding = result.findings[0]
    assert "The LR `args.lr` is used unchanged" in finding.message
    assert finding.related[0].filename.endswith("optim_factory.py") and finding.related[0].location.row == 10
    scaled = DRIVER.format(scale="args.lr = args.lr * args.batch_size * utils.get_world_size() / 256")
    assert checked_rows(tmp_path / "b", {**files, "main.py": scaled}, "main.py", ["TD203"]) == []
    # a helper whose LR the call does not decide
    fixed = {**files, "optim_factory.py": FACTORY.replace("lr=args.lr", "lr=get_lr()")}
    assert checked_rows(tmp_path / "c", {**fixed, "main.py": plain}, "main.py", ["TD203"]) == []
