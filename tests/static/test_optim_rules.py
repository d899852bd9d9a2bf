"""Model facts (facts/models/static.py), batch facts (facts/batching/static.py) and the optimizer rules TD202-TD206."""

from __future__ import annotations

import ast
import textwrap

from traindoctor.check.engine import check_source, file_context, instantiate
from traindoctor.config import Settings
from traindoctor.facts.models.static import model_of
from traindoctor.static.context import FileContext

CODES = ["TD202", "TD203", "TD204", "TD205", "TD206"]


def _ctx(src: str) -> FileContext:
    src = textwrap.dedent(src)
    return file_context("train.py", src, ast.parse(src), Settings(min_torch_version="2.13"))


def _findings(src: str, codes=CODES, filename: str = "train.py"):
    result = check_source(textwrap.dedent(src), filename, Settings(min_torch_version="2.13"), instantiate(codes))
    assert not result.internal_errors
    return result.findings


def _rows(src: str, codes=CODES, filename: str = "train.py") -> list[tuple[str, int]]:
    return [(f.code, f.location.row) for f in _findings(src, codes, filename)]


def _model(src: str, name: str = "model"):
    ctx = _ctx(src)
    node = next(n for n in ctx.of(ast.Name) if n.id == name and isinstance(n.ctx, ast.Load))
    return model_of(ctx, node)


# ------------------------------------------------------------------------------ models


def test_sequential_parameter_names_follow_positions_and_bias_flags():
    info = _model("""
    import torch.nn as nn
    model = nn.Sequential(nn.Linear(4, 4, bias=False), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    model = model.to("cpu")
    print(model)
    """)
    assert info.param_names == ["0.weight", "1.weight", "1.bias", "3.weight", "3.bias"]
    assert info.norm_params() == ["1.weight", "1.bias"]
    assert info.has_batchnorm and not info.has_dropout


def test_module_subclass_names_ignore_hyperparameters_and_wrappers_prefix_them():
    info = _model("""
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    class Net(nn.Module):
        def __init__(self, hidden: int = 8, p=0.1):
            super().__init__()
            self.hidden = hidden
            self.fc = nn.Linear(hidden, hidden)
            self.norm = nn.LayerNorm(hidden, elementwise_affine=False)
            self.drop = nn.Dropout(p)
            self.scale = nn.Parameter(torch.ones(1))

    model = DDP(Net())
    print(model)
    """)
    assert info.param_names == ["module.fc.weight", "module.fc.bias", "module.scale"]
    assert info.has_dropout and not info.has_batchnorm


def test_unknown_parts_make_names_unknown_but_keep_kinds():
    info = _model("""
    from torch import nn

    class Net(nn.Module):
        def __init__(self, backbone, n):
            super().__init__()
            self.backbone = backbone
            self.blocks = nn.ModuleList([nn.BatchNorm2d(8) for _ in range(n)])

    model = Net(None, 3)
    print(model)
    """)
    assert info.param_names is None
    assert info.has_batchnorm


def test_torchvision_resnet_names_are_exact():
    info = _model("""
    import torchvision
    model = torchvision.models.resnet18()
    print(model)
    """)
    names = info.param_names
    assert "layer2.0.downsample.1.weight" in names and "layer1.0.downsample.1.weight" not in names
    assert "fc.bias" in names and len([n for n in names if n.endswith("bn1.weight")]) == 9


# ------------------------------------------------------------------------------ TD204


def test_td204_adamw_default_decay_fires_but_adam_default_does_not():
    src = """
    import torch
    model = torch.nn.Linear(4, 2)
    a = torch.optim.AdamW(model.parameters(), lr=1e-3)
    b = torch.optim.Adam(model.parameters(), lr=1e-3)
    c = torch.optim.SGD(model.parameters(), 0.1, 0.9, 0, 5e-4)
    d = torch.optim.SGD(model.parameters(), 0.1, 0.9, 0.5e-4)
    """
    found = _findings(src, ["TD204"])
    assert [f.location.row for f in found] == [4, 6]
    assert "weight_decay=0.01 (its default)" in found[0].message
    assert "weight_decay=0.0005" in found[1].message and "default" not in found[1].message


def test_td204_silent_for_unknown_or_zero_decay_and_for_grouped_params():
    src = """
    import argparse
    import torch
    from traindoctor.recipes import param_groups

    parser = argparse.ArgumentParser()
    parser.add_argument("--wd", type=float, default=0.0)
    args = parser.parse_args()
    model = torch.nn.Linear(4, 2)
    a = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=args.wd)
    b = torch.optim.AdamW(param_groups(model, 0.05), lr=1e-3)
    c = torch.optim.AdamW(model.parameters(), lr=1e-3, **cfg)
    d = torch.optim.AdamW([p for n, p in model.named_parameters() if "bias" not in n], lr=1e-3)
    """
    assert _rows(src, ["TD204"]) == []


def test_td204_skips_test_files():
    src = """
    import torch
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    """
    assert _rows(src, ["TD204"], filename="train.py") == [("TD204", 3)]
    assert _rows(src, ["TD204"], filename="tests/test_train.py") == []


# ------------------------------------------------------------------------------ TD205


def test_td205_reports_the_list_once_and_names_the_dead_patterns():
    src = """
    import torch.nn as nn
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    no_decay = ["bias",
                "LayerNorm.weight"]
    a = [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)]
    b = [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)]
    """
    found = _findings(src, ["TD205"])
    assert [(f.location.row, f.location.column) for f in found] == [(4, 12)]
    assert '"LayerNorm.weight"' in found[0].message and "1.weight" in found[0].message


def test_td205_silent_when_a_pattern_covers_the_norm_layers():
    src = """
    import torch.nn as nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
            self.bn1 = nn.BatchNorm2d(8)

    model = Net()
    no_decay = ["bias", "bn", "LayerNorm.weight"]  # "bn" matches bn1.weight: the filter works
    a = [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)]
    """
    assert _rows(src, ["TD205"]) == []


# ------------------------------------------------------------------------------ TD202 / TD206


BN_ACCUM = """
import argparse
import torch
import torchvision

parser = argparse.ArgumentParser()
parser.add_argument("--accum", type=int, default={accum})
args = parser.parse_args()
model = torchvision.models.resnet18()
loader = torch.utils.data.DataLoader(train_set, batch_size={batch})
for i, (x, y) in enumerate(loader):
    loss = criterion(model(x), y) / args.accum
    loss.backward()
    if (i + 1) % args.accum == 0:
        optimizer.step()
"""


def test_td202_needs_accumulation_beyond_one():
    assert _rows(BN_ACCUM.format(accum=8, batch=4), ["TD202"]) == [("TD202", 10)]
    found = _findings(BN_ACCUM.format(accum=8, batch=4), ["TD202"])
    assert "4 x 8" in found[0].message
    assert _rows(BN_ACCUM.format(accum=1, batch=4), ["TD202"]) == []
    assert _rows(BN_ACCUM.format(accum=8, batch=16), ["TD202"]) == []


def test_td206_uses_the_effective_batch():
    found = _findings(BN_ACCUM.format(accum=8, batch=256), ["TD206"])
    assert [f.location.row for f in found] == [10]
    assert "256 x 8 = 2048" in found[0].message
    assert _rows(BN_ACCUM.format(accum=2, batch=256), ["TD206"]) == []


def test_td206_silent_with_any_warmup():
    src = BN_ACCUM.format(accum=1, batch=4096) + "warmup_steps = 500\n"
    assert _rows(src, ["TD206"]) == []
    assert _rows(BN_ACCUM.format(accum=1, batch=4096), ["TD206"]) == [("TD206", 10)]


# ------------------------------------------------------------------------------ TD203

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
    assert _rows(DDP_SCRIPT.format(extra=""), ["TD203"]) == [("TD203", 10)]


def test_td203_silent_when_lr_or_batch_relate_to_world_size():
    assert _rows(DDP_SCRIPT.format(extra="args.lr = args.lr * dist.get_world_size()"), ["TD203"]) == []
    assert _rows(DDP_SCRIPT.format(extra="per_gpu_batch = global_batch // dist.get_world_size()"), ["TD203"]) == []
    assert _rows(DDP_SCRIPT.format(extra=""), ["TD203"], filename="tests/test_ddp.py") == []


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
    assert _rows(src, ["TD203"]) == []
