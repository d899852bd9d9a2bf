"""TD701 eval-in-train-mode: static and runtime.

The runtime tests on the evaluation loop shared with TD702 are in tests/runtime/test_eval_rules.py
(the findings must point to that loop's lines, in the tests' own file).
Here: the static rule, and the message that names only the model's own layers.
"""

from __future__ import annotations

import torch
from helpers.snippets import eval_check, eval_rows
from torch import nn

import traindoctor


# ------------------------------------------------------------------ traindoctor check
def test_td701_ignores_models_without_bn_or_dropout_and_eval_of_other_receivers():
    src = """
    import torch
    from torch import nn

    plain = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with torch.no_grad():
        plain(x)

    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.2))
    model.module.eval()
    with torch.no_grad():
        model(x)
    """
    assert eval_rows(src, ["TD701"]) == []


def test_td701_fires_after_train_even_when_another_model_is_put_in_eval():
    src = """
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    ema = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    model.train()
    ema.eval()
    with torch.no_grad():
        out = model(x)
        ref = ema(x)
    """
    result = eval_check(src, ["TD701"])
    assert [(f.location.row, f.location.column) for f in result.findings] == [(10, 11)]
    assert "`model.eval()`" in result.findings[0].message and "BatchNorm" in result.findings[0].message


def test_td701_silent_for_model_forward_with_frozen_backbone_and_lightning_hooks():
    src = """
    import torch
    import torchvision
    from torch import nn

    class Detector(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = torchvision.models.resnet50()
            self.head = nn.Linear(2048, 10)

        def forward(self, x):
            with torch.no_grad():
                feats = self.backbone(x)
            return self.head(feats)

        @torch.no_grad()
        def validation_step(self, batch, idx):
            return self.backbone(batch)
    """
    assert eval_rows(src, ["TD701"]) == []


def test_comprehension_is_an_evaluation_loop_under_no_grad():
    rows = eval_rows("""
    import torch
    import torchvision

    def train(model, optimizer, train_loader, val_loader):
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        with torch.no_grad():
            return [model(x).argmax(1) for x, _ in val_loader]

    net = torchvision.models.resnet18()
    train(net, torch.optim.SGD(net.parameters(), lr=0.1), train_dl, val_dl)
    """)
    assert rows == [("TD701", 12)]


# ------------------------------------------------------------------ traindoctor run
def _eval_in_train_mode(model: nn.Module) -> traindoctor.runtime.session.Session:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    with traindoctor.watch(select=["TD701"]) as doctor:
        for _ in range(3):
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                model(x)  # evaluation without model.eval()
    return doctor


def test_td701_speaks_of_batchnorm_only_when_the_model_has_it() -> None:
    dropout_only = _eval_in_train_mode(nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.2), nn.Linear(8, 1)))
    (finding,) = dropout_only.findings
    assert "Dropout stayed on" in finding.message and "BatchNorm" not in finding.message
    with_bn = _eval_in_train_mode(nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1)))
    (finding,) = with_bn.findings
    assert "BatchNorm updated its running statistics" in finding.message
    assert "Dropout" not in finding.message
