"""autocast_settings: the decision table, and a loop that is unchanged where autocast is off."""

from __future__ import annotations

import copy
import dataclasses
import warnings

import pytest
import torch
from torch import nn

from traindoctor.recipes import AmpSettings, autocast_settings

from ._models import TinyResNet


def test_ampere_and_newer_use_bf16_without_scaler() -> None:
    amp = autocast_settings("cuda:0", cuda_capability=(8, 0))
    assert (amp.dtype, amp.device_type, amp.enabled, amp.loss_scaling) == (torch.bfloat16, "cuda", True, False)
    assert not amp.scaler.is_enabled()
    assert autocast_settings("cuda", cuda_capability=(9, 0)).dtype == torch.bfloat16


def test_older_gpus_use_fp16_with_loss_scaling() -> None:
    with warnings.catch_warnings():
        # on this CPU-only machine PyTorch disables a CUDA scaler (with a warning); the
        # decision itself is what is under test
        warnings.simplefilter("ignore")
        amp = autocast_settings(torch.device("cuda", 1), cuda_capability=(7, 5))
    assert (amp.dtype, amp.enabled, amp.loss_scaling) == (torch.float16, True, True)
    assert amp.scaler.is_enabled() == torch.cuda.is_available()


@pytest.mark.filterwarnings("ignore:torch.cuda.amp.GradScaler is enabled")
def test_bf16_override_wins_over_capability() -> None:
    assert autocast_settings("cuda", cuda_capability=(7, 0), bf16_supported=True).dtype == torch.bfloat16
    assert autocast_settings("cuda", cuda_capability=(9, 0), bf16_supported=False).dtype == torch.float16


@pytest.mark.parametrize("device", ["cpu", torch.device("cpu"), "mps", "meta"])
def test_other_devices_train_in_float32(device: object) -> None:
    amp = autocast_settings(device)
    assert (amp.dtype, amp.enabled, amp.loss_scaling) == (torch.float32, False, False)
    assert not amp.scaler.is_enabled()


def test_default_device_on_a_cpu_machine() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert autocast_settings().device_type == "cpu"


def test_bad_device_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="not a device"):
        autocast_settings("gpu0")


def test_cuda_without_cuda_is_a_clear_error() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match="CUDA is not available"):
        autocast_settings("cuda")


def test_settings_are_frozen() -> None:
    amp = autocast_settings("cpu")
    with pytest.raises(dataclasses.FrozenInstanceError):
        amp.enabled = True  # type: ignore[misc]


def test_cpu_bf16_on_request_really_autocasts() -> None:
    amp = autocast_settings("cpu", bf16_supported=True)
    assert (amp.dtype, amp.enabled) == (torch.bfloat16, True) and not amp.scaler.is_enabled()
    with amp.autocast():
        out = nn.Linear(4, 4)(torch.randn(2, 4))
    assert out.dtype == torch.bfloat16


def train(model: nn.Module, amp: AmpSettings | None, steps: int = 3) -> nn.Module:
    torch.manual_seed(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))
    for _ in range(steps):
        opt.zero_grad()
        if amp is None:
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        else:
            with amp.autocast():
                loss = nn.functional.cross_entropy(model(x), y)
            amp.scaler.scale(loss).backward()
            amp.scaler.unscale_(opt)
            amp.scaler.step(opt)
            amp.scaler.update()
    return model


def test_disabled_settings_leave_a_cpu_loop_bit_identical() -> None:
    torch.manual_seed(0)
    model = TinyResNet()
    plain = train(copy.deepcopy(model), None)
    recipe = train(copy.deepcopy(model), autocast_settings("cpu"))
    for (name, a), (_, b) in zip(plain.named_parameters(), recipe.named_parameters()):
        assert torch.equal(a, b), name
