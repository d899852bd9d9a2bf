"""Regression tests for misses a held-out precision review found (none were false positives).

* One checkpoint dict saved to two paths in a row is one mistake: TD501-TD504 report it once.
* A helper that *reads* a checkpoint back (``restart_from_checkpoint(path, optimizer=...)``)
  is not an unknown save that might hold RNG state or anything else.
* ``transformers.AdamW`` (deprecated, default ``weight_decay=0.0``) is an Adam-family optimizer
  for TD203/TD204.
* ``args.workers = ...`` reassigns the argparse value: its default no longer tells the value.
"""

from __future__ import annotations

import ast
import textwrap

from traindoctor.check.engine import check_source, file_context, instantiate
from traindoctor.config import Settings
from traindoctor.static.args import UNKNOWN
from traindoctor.static.context import FileContext


def findings(source: str, codes: list[str]):
    source = textwrap.dedent(source).lstrip("\n")
    result = check_source(source, "train.py", Settings(min_torch_version="2.13"), instantiate(codes))
    assert not result.internal_errors, result.internal_errors
    return result.findings


def found(source: str, codes: list[str]) -> list[tuple[str, int]]:
    return sorted((f.code, f.location.row) for f in findings(source, codes))


def context(source: str) -> FileContext:
    source = textwrap.dedent(source).lstrip("\n")
    return file_context("train.py", source, ast.parse(source), Settings(min_torch_version="2.13"))


CKPT = ["TD501", "TD502", "TD503", "TD504"]

# ------------------------------------------------------------------ TD50x: one dict, two paths
TWO_PATHS = """
import os
import torch
import utils

def main(args):
    model = build().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 30)
    scaler = torch.amp.GradScaler("cuda")
    for epoch in range(args.epochs):
        for x, y in loader:
            with torch.autocast("cuda"):
                loss = model(x.cuda()).sum()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        scheduler.step()
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
        utils.save_on_master(state, os.path.join(args.out, "checkpoint.pth"))
        if epoch % 10 == 0:
            utils.save_on_master(state, os.path.join(args.out, f"checkpoint{epoch:04}.pth"))
"""


def test_one_dict_saved_to_two_paths_is_reported_once_per_rule() -> None:
    assert found(TWO_PATHS, CKPT) == [("TD502", 19), ("TD503", 19), ("TD504", 19)]


def test_rebinding_between_the_saves_makes_two_checkpoints() -> None:
    src = TWO_PATHS.replace(
        "        if epoch % 10 == 0:\n",
        '        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}\n'
        "        if epoch % 10 == 0:\n",
    )
    assert found(src, ["TD504"]) == [("TD504", 19), ("TD504", 22)]


def test_same_name_saved_in_two_loops_is_reported_twice() -> None:
    src = """
    import torch

    def train(model, loader, args):
        optimizer = torch.optim.Adam(model.parameters())
        for epoch in range(args.epochs):
            for x in loader:
                model(x).sum().backward()
                optimizer.step()
            ckpt = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
            torch.save(ckpt, "last.pt")
            for i in range(2):
                torch.save(ckpt, f"copy{i}.pt")
    """
    assert found(src, ["TD504"]) == [("TD504", 10), ("TD504", 12)]


def test_model_only_state_dict_saved_twice_gives_one_td501() -> None:
    src = """
    import torch

    model = Net()
    optimizer = torch.optim.Adam(model.parameters())
    for epoch in range(10):
        for x in loader:
            model(x).sum().backward()
            optimizer.step()
        weights = model.state_dict()
        torch.save(weights, "last.pt")
        torch.save(weights, f"epoch{epoch}.pt")
    """
    assert found(src, ["TD501"]) == [("TD501", 10)]


# ------------------------------------------------------------------ TD504: a restore helper
RESTORE = """
import os
import torch
import utils

def main(args):
    model = build().cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    to_restore = {"epoch": 0}
    utils.{helper}(os.path.join(args.out, "checkpoint.pth"), run_variables=to_restore, model=model, optimizer=optimizer)
    for epoch in range(to_restore["epoch"], args.epochs):
        for x, y in loader:
            loss = model(x.cuda()).sum()
            loss.backward()
            optimizer.step()
        save_dict = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch + 1}
        utils.save_on_master(save_dict, os.path.join(args.out, "checkpoint.pth"))
"""


def test_a_helper_that_restores_from_a_checkpoint_saves_no_rng() -> None:
    for helper in ("restart_from_checkpoint", "load_checkpoint", "resume_from_ckpt", "restore_checkpoint"):
        assert found(RESTORE.replace("{helper}", helper), ["TD504"]) == [("TD504", 16)], helper


def test_an_unknown_helper_that_saves_may_still_hold_rng() -> None:
    for helper in ("save_checkpoint", "checkpoint", "save_or_resume_checkpoint"):
        assert found(RESTORE.replace("{helper}", helper), ["TD504"]) == [], helper


# ------------------------------------------------------------------ TD203/TD204: transformers.AdamW
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


def test_td204_transformers_adamw_defaults_to_no_decay() -> None:
    src = """
    from transformers import AdamW

    model = Net()
    optimizer = AdamW(model.parameters(), lr=5e-5)
    """
    assert found(src, ["TD204"]) == []


def test_td204_transformers_adamw_with_explicit_decay_fires() -> None:
    src = """
    import transformers
    from transformers.optimization import AdamW as HF

    model = Net()
    opt_a = transformers.AdamW(model.parameters(), lr=5e-5, weight_decay=0.01)
    opt_b = HF(model.parameters(), 5e-5, (0.9, 0.999), 1e-6, 0.1)
    opt_c = HF(model.parameters(), lr=5e-5, weight_decay=0.0)
    """
    hits = findings(src, ["TD204"])
    assert [(f.code, f.location.row) for f in hits] == [("TD204", 5), ("TD204", 6)]
    assert hits[0].message.startswith("`AdamW` applies weight_decay=0.01 to every parameter of `model`")
    assert "weight_decay=0.1 to every" in hits[1].message


# ------------------------------------------------------------------ argparse options reassigned
PARSER = """
import argparse
import torch

parser = argparse.ArgumentParser()
parser.add_argument("-j", "--workers", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--epochs", type=int, default=90)

def main_worker(gpu, ngpus_per_node, args):
    {reassign}
    loader = torch.utils.data.DataLoader(dataset, batch_size=256, num_workers=args.workers)
    model = Net().cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        train(loader, model, optimizer)

def train(loader, model, optimizer):
    for x, y in loader:
        model(x).sum().backward()
        optimizer.step()

if __name__ == "__main__":
    main_worker(0, 1, parser.parse_args())
"""


def _workers_attr(ctx: FileContext) -> ast.Attribute:
    return next(n for n in ctx.of(ast.Attribute) if n.attr == "workers" and isinstance(n.ctx, ast.Load))


def test_argparse_default_is_unknown_once_the_option_is_reassigned() -> None:
    plain = context(PARSER.replace("{reassign}", "pass"))
    assert plain.argparse_default(_workers_attr(plain)) == 32
    for reassign in (
        "args.workers = int((args.workers + ngpus_per_node - 1) / ngpus_per_node)",
        "args.workers //= ngpus_per_node",
        "args.workers: int = 4",
        'setattr(args, "workers", 4)',
    ):
        ctx = context(PARSER.replace("{reassign}", reassign))
        node = next(n for n in ctx.of(ast.Attribute) if n.attr == "workers" and n.lineno == 11)
        assert ctx.argparse_default(node) is UNKNOWN, reassign
        assert ctx.value(node) is UNKNOWN, reassign
        assert ctx.argparse_default(node, declared=True) == 32, reassign
        lr = next(n for n in ctx.of(ast.Attribute) if n.attr == "lr" and isinstance(n.ctx, ast.Load))
        assert ctx.value(lr) == 0.1, reassign  # other options keep their defaults


def test_an_attribute_of_self_does_not_hide_the_option() -> None:
    ctx = context(
        PARSER.replace("{reassign}", "pass") + "\nclass Cfg:\n    def __init__(self):\n        self.workers = 2\n"
    )
    assert ctx.argparse_default(_workers_attr(ctx)) == 32


def test_td103_does_not_quote_a_count_that_the_script_changes() -> None:
    plain = findings(PARSER.replace("{reassign}", "pass"), ["TD103"])
    assert [(f.code, f.location.row) for f in plain] == [("TD103", 11)]
    assert "its 32 worker processes are restarted" in plain[0].message
    src = PARSER.replace("{reassign}", "args.workers = int((args.workers + ngpus_per_node - 1) / ngpus_per_node)")
    divided = findings(src, ["TD103"])
    assert [(f.code, f.location.row) for f in divided] == [("TD103", 11)]
    assert "and its worker processes are restarted each time" in divided[0].message
    assert "32" not in divided[0].message


# ------------------------------------------------------------------ TD103 through MetricLogger.log_every
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
