"""TD403 benchmark-with-deterministic: static and runtime."""

from __future__ import annotations

import pytest
import torch
from helpers.rule_loops import codes, conv_bn_net, finding, line_of, train_steps
from helpers.snippets import check_findings

import traindoctor

pytestmark = pytest.mark.usefixtures("restore_cudnn_flags")

# ------------------------------------------------------------------ traindoctor check
IMAGENET_MAIN = """
import torch
import torch.backends.cudnn as cudnn

def main(args):
    if args.seed is not None:
        torch.manual_seed(args.seed)
        cudnn.deterministic = True
        cudnn.benchmark = False
    main_worker(args)

def main_worker(args):
    model = models.resnet50().cuda(args.gpu)
    cudnn.benchmark = True
"""


def test_td403_imagenet_example_benchmark_overrides_the_seeded_setting():
    (finding,) = check_findings(IMAGENET_MAIN, ["TD403"])
    assert finding.location.row == 14
    assert "(line 14)" in finding.message and "`cudnn.deterministic = True` (line 8)" in finding.message
    assert finding.message.endswith("for reproducible runs.")


@pytest.mark.parametrize(
    "imports,prefix",
    [
        ("from torch.backends import cudnn", "cudnn"),
        ("import torch.backends.cudnn as cb", "cb"),
        ("import torch.backends as tb", "tb.cudnn"),
        ("import torch", "torch.backends.cudnn"),
    ],
)
def test_td403_resolves_aliases(imports, prefix):
    src = f"{imports}\n{prefix}.benchmark = True\n{prefix}.deterministic = True\n"
    assert [f.location.row for f in check_findings(src, ["TD403"])] == [3]


def test_td403_unrelated_attribute_named_benchmark_is_ignored():
    src = """
    import torch
    config.benchmark = True
    config.deterministic = True
    torch.backends.cudnn.benchmark = True
    """
    assert check_findings(src, ["TD403"]) == []


def test_td403_later_use_deterministic_algorithms_is_the_report_site():
    src = """
    import torch
    torch.backends.cudnn.benchmark = True
    train()
    torch.use_deterministic_algorithms(True, warn_only=True)
    """
    (finding,) = check_findings(src, ["TD403"])
    assert finding.location.row == 5
    assert "`torch.use_deterministic_algorithms(True)` (line 5)" in finding.message


# ------------------------------------------------------------------ traindoctor run
def test_td403_benchmark_and_deterministic() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD403"]) as doctor:
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = True  # the later assignment
        train_steps(model, opt, steps=1)
    f = finding(doctor, "TD403")
    assert f.filename == __file__ and f.location.row == line_of("# the later assignment")
    assert f.step == 1


def test_td403_silent_for_one_flag() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD403"]) as doctor:
        torch.backends.cudnn.deterministic = True
        train_steps(model, opt, steps=1)
    assert codes(doctor) == []
    assert type(torch.backends.cudnn).__dict__["benchmark"].__class__.__name__ == "ContextProp"
