"""TD308 half-precision-weights: static.

Its runtime tests are in tests/runtime/test_amp_rules.py: they run one mixed-precision CPU loop,
shared with the other AMP rules, whose autocast and clipping lines the findings must point to.
"""

from __future__ import annotations

from helpers.snippets import amp_found, amp_run


def test_td308_half_after_to_device_on_a_pretrained_model():
    # Shape seen in a real fine-tuning script: fp16 weights *and* a GradScaler.
    _, result = amp_run(
        """
        import torch
        import torch.optim as optim

        def main():
            model = XTTS2Model.from_pretrained(path)
            model.to(device).half()
            optimizer = optim.AdamW(model.parameters(), lr=1e-4)
            for x, y in loader:
                loss = model(x, y)
                loss.backward()
                optimizer.step()
        """,
        ["TD308"],
    )
    [f] = result.findings
    assert (f.location.row, f.location.column) == (6, 5)
    assert "autocast" in f.message


def test_td308_helper_that_casts_for_evaluation_is_silent():
    assert (
        amp_found(
            """
        import torch

        def evaluate(model, loader):
            model = model.to(dtype=torch.float16)
            return [model(x) for x in loader]

        def train(model, loader):
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in loader:
                model(x).sum().backward()
                opt.step()
        """,
            ["TD308"],
        )
        == []
    )


def test_td308_fp32_master_weights_recipe_is_silent():
    # Pre-AMP mixed precision: fp16 model, fp32 master copies in the optimizer.
    assert (
        amp_found(
            """
        import torch

        model = Net().cuda().half()
        master = [p.detach().clone().float() for p in model.parameters()]
        optimizer = torch.optim.SGD(master, lr=0.1)
        """,
            ["TD308"],
        )
        == []
    )


def test_td308_module_subclass_chain_and_type_cast():
    assert amp_found(
        """
        import torch
        from torch import nn

        class Base(nn.Module):
            pass

        class Net(Base):
            pass

        net = Net().cuda()
        net.type(torch.cuda.HalfTensor)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        """,
        ["TD308"],
    ) == [("TD308", 11)]


def test_td308_backward_without_any_update_is_silent():
    # torch's own DDP test shape: cast to half, run backward, assert on the gradients' dtype.
    src = """
        import torch

        def check_half_grads(model, inp):
            model = model.half()
            out = model(inp)
            out.sum().backward()
            for param in model.parameters():
                assert param.grad.dtype == torch.float16
        """
    assert amp_found(src, ["TD308"]) == []


def test_td308_backward_and_step_through_a_passed_optimizer_fires():
    src = """
        import torch

        class Net(torch.nn.Module):
            pass

        def train(opt, loader):
            model = Net().cuda().half()
            for x in loader:
                model(x).sum().backward()
                opt.step()
        """
    assert amp_found(src, ["TD308"]) == [("TD308", 7)]
