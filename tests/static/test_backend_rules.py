"""TD401 cudnn-benchmark-off and TD403 benchmark-with-deterministic on realistic scripts."""

from __future__ import annotations

import textwrap

import pytest

from traindoctor.check.engine import check_source, instantiate
from traindoctor.config import Settings


def _findings(src: str, codes: list[str], filename: str = "train.py"):
    result = check_source(textwrap.dedent(src), filename, Settings(min_torch_version="2.13"), instantiate(codes))
    assert not result.internal_errors
    return result.findings


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
    (finding,) = _findings(IMAGENET_MAIN, ["TD403"])
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
    assert [f.location.row for f in _findings(src, ["TD403"])] == [3]


def test_td403_unrelated_attribute_named_benchmark_is_ignored():
    src = """
    import torch
    config.benchmark = True
    config.deterministic = True
    torch.backends.cudnn.benchmark = True
    """
    assert _findings(src, ["TD403"]) == []


def test_td403_later_use_deterministic_algorithms_is_the_report_site():
    src = """
    import torch
    torch.backends.cudnn.benchmark = True
    train()
    torch.use_deterministic_algorithms(True, warn_only=True)
    """
    (finding,) = _findings(src, ["TD403"])
    assert finding.location.row == 5
    assert "`torch.use_deterministic_algorithms(True)` (line 5)" in finding.message


CNN_SCRIPT = """
import torch
import torchvision
from torchvision import transforms
from torch.utils.data import DataLoader

train_tf = transforms.Compose([transforms.RandomResizedCrop(224), transforms.ToTensor()])
model = torchvision.models.resnet18(num_classes=10).cuda()
loader = DataLoader(dataset, batch_size=64, num_workers=4, pin_memory=True)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""


def test_td401_fires_at_the_model_constructor():
    (finding,) = _findings(CNN_SCRIPT, ["TD401"])
    assert finding.location.row == 8 and finding.severity.value == "info"
    assert "torch.backends.cudnn.benchmark" in finding.message


@pytest.mark.parametrize(
    "change",
    [
        ("transforms.RandomResizedCrop(224)", "transforms.Resize(256)"),  # no fixed-size evidence
        ("pin_memory=True)", "pin_memory=True, collate_fn=pad_batch)"),  # padded batches vary
        ("optimizer = ", "torch.backends.cudnn.benchmark = args.benchmark\noptimizer = "),
        (".cuda()", ""),  # CPU-only
        ("optimizer = torch.optim.SGD(model.parameters(), lr=0.1)", "model.eval()"),  # no training
        ("torchvision.models.resnet18", "torchvision.models.vit_b_16"),  # not a CNN
    ],
)
def test_td401_stays_silent_without_evidence(change):
    old, new = change
    assert old in CNN_SCRIPT
    assert _findings(CNN_SCRIPT.replace(old, new), ["TD401"]) == []


def test_td401_lightning_trainer_benchmark_counts_as_a_decision():
    src = CNN_SCRIPT + "trainer = L.Trainer(accelerator='cuda', benchmark=False)\nimport lightning as L\n"
    assert _findings(src, ["TD401"]) == []
