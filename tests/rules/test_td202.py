"""TD202 batchnorm-small-batch: static and runtime.

Accumulation that makes the BatchNorm batch small.
"""

from __future__ import annotations

import torch
from helpers.rule_loops import codes, conv_bn_net, finding, train_steps
from helpers.scripts import BN_ACCUM
from helpers.snippets import check_findings, check_rows

import traindoctor


# ------------------------------------------------------------------ traindoctor check
def test_td202_needs_accumulation_beyond_one():
    assert check_rows(BN_ACCUM.format(accum=8, batch=4), ["TD202"]) == [("TD202", 10)]
    found = check_findings(BN_ACCUM.format(accum=8, batch=4), ["TD202"])
    assert "4 x 8" in found[0].message
    assert check_rows(BN_ACCUM.format(accum=1, batch=4), ["TD202"]) == []
    assert check_rows(BN_ACCUM.format(accum=8, batch=16), ["TD202"]) == []


# ------------------------------------------------------------------ traindoctor run
def test_td202_small_batchnorm_batch_with_accumulation() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD202"]) as doctor:
        train_steps(model, opt, steps=3, batch=4, accumulation=4)
    ev = finding(doctor, "TD202").evidence
    assert ev["batchnorm_batch"] == 4 and ev["backward_per_step"] == 4
    assert ev["effective_batch"] == 16 and ev["batchnorm_layers"] == 1


def test_td202_silent_for_large_batch_and_for_eval_only_batchnorm() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD202"]) as doctor:
        train_steps(model, opt, steps=2, batch=32)
        model.eval()
        with torch.no_grad():
            model(torch.randn(2, 3, 8, 8))  # tiny evaluation batches do not matter
    assert codes(doctor) == []


def test_td202_threshold_is_configurable() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD202"], thresholds={"TD202.min_batch": 4}) as doctor:
        train_steps(model, opt, steps=2, batch=4)
    assert codes(doctor) == []
