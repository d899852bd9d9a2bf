"""TD401 cudnn-benchmark-off: static and runtime.

Evidence of fixed shapes and a CNN; at run time conv forwards replayed under a fake CUDA device.
"""

from __future__ import annotations

import pytest
import torch
from helpers.rule_loops import FAKE_A100, codes, conv_bn_net, cuda_conv_run, finding, train_steps
from helpers.snippets import check_findings

import traindoctor

pytestmark = pytest.mark.usefixtures("restore_cudnn_flags")

# ------------------------------------------------------------------ traindoctor check
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
    (finding,) = check_findings(CNN_SCRIPT, ["TD401"])
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
    assert check_findings(CNN_SCRIPT.replace(old, new), ["TD401"]) == []


def test_td401_lightning_trainer_benchmark_counts_as_a_decision():
    src = CNN_SCRIPT + "trainer = L.Trainer(accelerator='cuda', benchmark=False)\nimport lightning as L\n"
    assert check_findings(src, ["TD401"]) == []


# ------------------------------------------------------------------ traindoctor run
def test_td401_fixed_shapes_without_benchmark() -> None:
    with traindoctor.watch(select=["TD401"], device=FAKE_A100) as doctor:
        cuda_conv_run(doctor, [(32, 3, 8, 8)] * 19 + [(8, 3, 8, 8)])  # last batch is partial
    f = finding(doctor, "TD401")
    assert f.evidence == {
        "conv_layers": 1,
        "conv_forwards": 20,
        "max_distinct_shapes": 2,
        "example_shape": [32, 3, 8, 8],
    }


def test_td401_silent_with_benchmark_deterministic_variable_shapes_or_cpu() -> None:
    fixed = [(32, 3, 8, 8)] * 20
    with traindoctor.watch(select=["TD401"], device=FAKE_A100) as bench:
        torch.backends.cudnn.benchmark = True
        cuda_conv_run(bench, fixed)
    torch.backends.cudnn.benchmark = False
    with traindoctor.watch(select=["TD401"], device=FAKE_A100) as determ:
        torch.backends.cudnn.deterministic = True
        cuda_conv_run(determ, fixed)
    torch.backends.cudnn.deterministic = False
    with traindoctor.watch(select=["TD401"], device=FAKE_A100) as variable:
        cuda_conv_run(variable, [(32, 3, 8 + i, 8) for i in range(20)])
    with traindoctor.watch(select=["TD401"]) as cpu:
        model = conv_bn_net()
        train_steps(model, torch.optim.SGD(model.parameters(), lr=0.1), steps=12)
    assert codes(bench) == codes(determ) == codes(variable) == codes(cpu) == []
