"""Model facts (facts/models/static.py): parameter names and layer kinds of ``nn.Sequential`` models,
``nn.Module`` subclasses, wrappers and torchvision models.
"""

from __future__ import annotations

import ast
import textwrap

from traindoctor.check.engine import file_context
from traindoctor.config import Settings
from traindoctor.facts.models.static import model_of
from traindoctor.static.context import FileContext


def _ctx(src: str) -> FileContext:
    src = textwrap.dedent(src)
    return file_context("train.py", src, ast.parse(src), Settings(min_torch_version="2.13"))


def _model(src: str, name: str = "model"):
    ctx = _ctx(src)
    node = next(n for n in ctx.of(ast.Name) if n.id == name and isinstance(n.ctx, ast.Load))
    return model_of(ctx, node)


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


def test_layers_a_helper_builds_for_the_module_that_stores_its_result():
    src = """
    import torch.nn as nn

    def create_modules(defs):
        module_list = nn.ModuleList()
        for d in defs:
            modules = nn.Sequential()
            modules.add_module("conv", nn.Conv2d(3, d, 3))
            if d > 1:
                modules.add_module("bn", nn.BatchNorm2d(d))
            module_list.append(modules)
        return {"channels": 3}, module_list

    def dropout_rate():
        probe = nn.Dropout(0.1)
        return probe.p

    class Darknet(nn.Module):
        def __init__(self, defs):
            super().__init__()
            self.hyperparams, self.module_list = create_modules(defs)
            self.rate = dropout_rate()

    model = Darknet([1, 2])
    print(model)
    """
    info = _model(src)
    assert info.has_batchnorm and "torch.nn.Conv2d" in info.kinds
    # only the helpers whose result the module stores as parts count (``self.rate`` is a number)
    assert not info.has_dropout
    unstored = _model(src.replace("self.hyperparams, self.module_list = create_modules(defs)", "create_modules(defs)"))
    assert not unstored.has_batchnorm
