"""Runtime halves of TD701 (eval in train mode) and TD702 (eval with grad) on tiny CPU loops.

One file for the two rules, where the rest of each rule is in tests/rules/test_td70N.py: they share
one evaluation loop (``_evaluate``), whose lines their findings must point to in the tests' own file.
"""

from __future__ import annotations

import torch
from helpers.rule_loops import codes, conv_bn_net, finding, images, line_of, train_steps
from torch import nn

import traindoctor


def _evaluate(model: nn.Module, batches: int = 3, *, no_grad: bool = True) -> None:
    for i in range(batches):
        x, _ = images(4, seed=100 + i)
        if no_grad:
            with torch.no_grad():
                model(x)  # eval forward (no_grad)
        else:
            model(x)  # eval forward (grad)


# ---------------------------------------------------------------- TD701
def test_td701_evaluation_in_training_mode() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD701"]) as doctor:
        train_steps(model, opt, steps=2)
        before = model[1].running_mean.clone()
        _evaluate(model)  # forgot model.eval()
    f = finding(doctor, "TD701")
    assert f.filename == __file__ and f.location.row == line_of("# eval forward (no_grad)")
    assert f.evidence == {"forwards": 3, "layers": {"batchnorm": 1, "dropout": 1}}
    assert f.step == 2
    assert not torch.equal(before, model[1].running_mean)  # the damage the finding describes


def test_td701_silent_after_model_eval() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD701"]) as doctor:
        train_steps(model, opt, steps=2)
        model.eval()
        _evaluate(model)
        model.train()
        train_steps(model, opt, steps=1)
    assert codes(doctor) == []


def test_td701_silent_for_bn_recalibration_and_untrained_teacher() -> None:
    model = conv_bn_net()
    teacher = conv_bn_net(seed=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = [images(4, seed=i) for i in range(3)]
    with traindoctor.watch(select=["TD701"]) as doctor:
        train_steps(model, opt, steps=2)
        torch.optim.swa_utils.update_bn([x for x, _ in loader], model)  # deliberate, train mode
        _evaluate(teacher)  # a model that is never trained here (e.g. a frozen teacher)
    assert codes(doctor) == []


def test_td701_silent_without_mode_sensitive_layers() -> None:
    model = conv_bn_net(p=0.0)
    model[1] = nn.BatchNorm2d(4, track_running_stats=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD701"]) as doctor:
        train_steps(model, opt, steps=2)
        _evaluate(model)
    assert codes(doctor) == []


# ---------------------------------------------------------------- TD702
def test_td702_eval_mode_forwards_record_graphs_nobody_uses() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD702"]) as doctor:
        train_steps(model, opt, steps=2)
        model.eval()
        _evaluate(model, batches=4, no_grad=False)
        model.train()
        train_steps(model, opt, steps=1)  # the next epoch: its backward must not excuse the eval
    f = finding(doctor, "TD702")
    assert f.filename == __file__ and f.location.row == line_of("# eval forward (grad)")
    assert f.evidence == {"forwards": 4, "layers": 4}  # conv, batchnorm, dropout, linear
    assert "no_grad" in f.message


def test_td702_silent_under_no_grad_and_for_frozen_batchnorm_finetuning() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD702"]) as doctor:
        train_steps(model, opt, steps=1)
        model.eval()
        _evaluate(model, batches=3)
        # Fine-tuning with every layer in eval mode (frozen BatchNorm statistics): the graphs
        # recorded in eval mode are used by backward() at every step, even with two forwards per
        # backward (a siamese loss).
        for step in range(3):
            a, _ = images(4, seed=step)
            b, _ = images(4, seed=step + 10)
            (model(a) - model(b)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
    assert codes(doctor) == []


# ---------------------------------------------------------------- windows of layer patches
def _layer_forwards() -> list:
    return [vars(cls)["forward"] for cls in (nn.Conv2d, nn.BatchNorm2d.__mro__[1], nn.Dropout, nn.Linear)]


def test_layers_run_their_own_forward_in_steady_training_and_are_watched_in_evaluation() -> None:
    """The layer patches cost about 2 us per layer call: they are in place for the first
    optimizer steps and again whenever an evaluation starts or ends, not in steady training."""
    from traindoctor.runtime.probes.modules import WINDOW_STEPS

    own = _layer_forwards()
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD701", "TD702"]) as doctor:
        patched = _layer_forwards()
        assert all(p is not o for p, o in zip(patched, own))  # watched from the start
        train_steps(model, opt, steps=WINDOW_STEPS)
        assert all(p is o for p, o in zip(_layer_forwards(), own))  # steady training: own forward
        model.eval()  # a switch to eval mode opens a window
        assert all(p is not o for p, o in zip(_layer_forwards(), own))
        _evaluate(model, batches=2)
        model.train()
        train_steps(model, opt, steps=WINDOW_STEPS + 1)
        assert all(p is o for p, o in zip(_layer_forwards(), own))
        with torch.no_grad():  # no eval(): the root's grad mode changed, which opens a window
            model(images(4, seed=50)[0])
        assert all(p is not o for p, o in zip(_layer_forwards(), own))
    assert all(p is o for p, o in zip(_layer_forwards(), own))
    from traindoctor.runtime.probes.modules import module_stats

    bn = module_stats(doctor).of_kind("batchnorm")[0]
    assert bn.total(training=False, grad=False) == 2  # both evaluation forwards, counted
    assert bn.total(training=True, grad=True) >= WINDOW_STEPS  # the windows' training forwards
    assert codes(doctor) == ["TD701"]  # the last forward: train mode under no_grad


def test_td702_after_long_training_and_a_late_evaluation() -> None:
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD702"]) as doctor:
        train_steps(model, opt, steps=6)  # the first window closed long ago
        model.eval()
        _evaluate(model, batches=4, no_grad=False)
        model.train()
        train_steps(model, opt, steps=1)
    assert finding(doctor, "TD702").evidence == {"forwards": 4, "layers": 4}


def test_a_compiled_model_keeps_the_layer_patches_and_is_not_recompiled() -> None:
    """torch.compile guards on the forwards it traced: once it compiled, the window stays open
    (windows opening and closing would recompile the model at every evaluation)."""
    from torch._dynamo.utils import counters

    from traindoctor.runtime.probes.modules import WINDOW_STEPS

    torch._dynamo.reset()
    own = _layer_forwards()
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD701", "TD702"]) as doctor:
        compiled = torch.compile(model, backend="eager")
        train_steps(compiled, opt, steps=WINDOW_STEPS + 2)
        assert all(p is not o for p, o in zip(_layer_forwards(), own))  # still patched
        frames = counters["frames"]["total"]
        for _ in range(2):  # two evaluations: no new compilation from the doctor
            compiled.eval()
            with torch.no_grad():
                compiled(images(4, seed=60)[0])
            compiled.train()
            train_steps(compiled, opt, steps=1)
        recompiled = counters["frames"]["total"] - frames
    torch._dynamo.reset()
    assert recompiled <= 2  # the eval-mode and no_grad variants, once each
    assert codes(doctor) == []
