"""TD205 dead-no-decay-filter: static and runtime."""

from __future__ import annotations

import torch
from helpers.rule_loops import codes, conv_bn_net, finding, train_steps
from helpers.snippets import check_findings, check_rows
from torch import nn

import traindoctor


# ------------------------------------------------------------------ traindoctor check
def test_td205_reports_the_list_once_and_names_the_dead_patterns():
    src = """
    import torch.nn as nn
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    no_decay = ["bias",
                "LayerNorm.weight"]
    a = [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)]
    b = [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)]
    """
    found = check_findings(src, ["TD205"])
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
    assert check_rows(src, ["TD205"]) == []


# ------------------------------------------------------------------ traindoctor run
def _name_filtered_groups(model: nn.Module, no_decay: list[str]) -> list[dict]:
    named = list(model.named_parameters())
    return [
        {"params": [p for n, p in named if not any(nd in n for nd in no_decay)], "weight_decay": 0.05},
        {"params": [p for n, p in named if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]


def test_td205_declared_patterns_that_match_nothing() -> None:
    model = conv_bn_net()
    patterns = ["bias", "BatchNorm.weight"]
    opt = torch.optim.AdamW(_name_filtered_groups(model, patterns), lr=1e-3)
    with traindoctor.watch(select=["TD205"], thresholds={"no_decay": patterns}) as doctor:
        train_steps(model, opt, steps=1)
    f = finding(doctor, "TD205")
    assert f.evidence["dead_patterns"] == ["BatchNorm.weight"]
    assert "0.weight" in f.evidence["example_names"]


def test_td205_empty_no_decay_group_without_declared_patterns() -> None:
    model = conv_bn_net()
    opt = torch.optim.AdamW(_name_filtered_groups(model, ["BatchNorm", "LayerNorm.bias"]), lr=1e-3)
    with traindoctor.watch(select=["TD205"]) as doctor:
        train_steps(model, opt, steps=1)
    f = finding(doctor, "TD205")
    assert f.evidence["empty_no_decay_groups"] == [1]
    assert f.evidence["decayed_bias_norm_params"] == 4


def test_td205_silent_when_patterns_match() -> None:
    model = conv_bn_net()
    patterns = ["bias", "1.weight"]
    opt = torch.optim.AdamW(_name_filtered_groups(model, patterns), lr=1e-3)
    with traindoctor.watch(select=["TD205"], thresholds={"no_decay": "bias, 1.weight"}) as doctor:
        train_steps(model, opt, steps=1)
    assert codes(doctor) == []
