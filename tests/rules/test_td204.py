"""TD204 weight-decay-on-bias-norm: static and runtime.

AdamW's default decay, transformers.AdamW, parameter groups; at run time the decayed names by module type.
"""

from __future__ import annotations

import torch
from helpers.rule_loops import codes, conv_bn_net, finding, train_steps, vectors
from helpers.snippets import check_findings, check_rows, findings, found
from torch import nn

import traindoctor
from traindoctor.recipes import param_groups


# ------------------------------------------------------------------ traindoctor check
def test_td204_adamw_default_decay_fires_but_adam_default_does_not():
    src = """
    import torch
    model = torch.nn.Linear(4, 2)
    a = torch.optim.AdamW(model.parameters(), lr=1e-3)
    b = torch.optim.Adam(model.parameters(), lr=1e-3)
    c = torch.optim.SGD(model.parameters(), 0.1, 0.9, 0, 5e-4)
    d = torch.optim.SGD(model.parameters(), 0.1, 0.9, 0.5e-4)
    """
    found = check_findings(src, ["TD204"])
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
    assert check_rows(src, ["TD204"]) == []


def test_td204_skips_test_files():
    src = """
    import torch
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    """
    assert check_rows(src, ["TD204"], filename="train.py") == [("TD204", 3)]
    assert check_rows(src, ["TD204"], filename="tests/test_train.py") == []


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


# ------------------------------------------------------------------ traindoctor run
def test_td204_adamw_over_all_parameters_decays_bias_and_norm() -> None:
    model = conv_bn_net()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)  # default weight_decay=0.01
    with traindoctor.watch(select=["TD204"]) as doctor:
        train_steps(model, opt, steps=1)
    f = finding(doctor, "TD204")
    ev = f.evidence
    assert ev["names"] == ["0.bias", "1.weight", "1.bias", "6.bias"]
    assert ev["kinds"] == {"bias": 2, "norm": 2} and ev["decayed"] == 4
    assert ev["weight_decay"] == [0.01]


def test_td204_classifies_by_module_type_not_name() -> None:
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(8, 8)
            self.gain = nn.LayerNorm(8)  # a norm layer with an unhelpful name
            self.fc = nn.Linear(8, 2, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.gain(self.proj(x)))

    model = Block()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-4)
    with traindoctor.watch(select=["TD204"]) as doctor:
        train_steps(model, opt, steps=1, data=vectors)
    ev = finding(doctor, "TD204").evidence
    assert ev["names"] == ["proj.bias", "gain.weight", "gain.bias"]
    assert ev["kinds"] == {"bias": 1, "norm": 2}


def test_td204_silent_with_proper_groups_or_no_decay() -> None:
    model = conv_bn_net()
    good = torch.optim.AdamW(param_groups(model, 0.05), lr=1e-3)
    with traindoctor.watch(select=["TD204"]) as a:
        train_steps(model, good, steps=1)
    plain = torch.optim.SGD(model.parameters(), lr=0.1)  # weight_decay=0
    with traindoctor.watch(select=["TD204"]) as b:
        train_steps(model, plain, steps=1)
    assert codes(a) == [] and codes(b) == []


def test_frozen_parameters_are_not_counted_as_decayed_at_run_time():
    """The optimizer skips parameters without a gradient, so a frozen backbone's norm layers are
    not decayed; only the new head's bias is (linear evaluation, SimCLR's evaluator)."""
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU())
    for p in backbone.parameters():
        p.requires_grad = False
    model = nn.Sequential(backbone, nn.Linear(16, 2))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=0.01)
    with traindoctor.watch(select=["TD204"]) as doctor:
        for _ in range(3):
            loss = model(torch.randn(8, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    (f,) = doctor.findings
    assert f.evidence["decayed"] == 1 and f.evidence["names"] == ["1.bias"]


def test_all_but_the_head_frozen_by_name_is_not_reported():
    # SimCLR's linear evaluation: every parameter but fc.weight/fc.bias frozen by name
    src = """
import torch
import torchvision

model = torchvision.models.resnet18(num_classes=10)
for name, param in model.named_parameters():
    if name not in ["fc.weight", "fc.bias"]:
        param.requires_grad = False
optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, weight_decay=0.0008)
"""
    assert found(src, ["TD204"]) == []
    assert found(src.replace("param.requires_grad = False", "print(param)"), ["TD204"]) == [("TD204", 8)]
