"""The rule probes themselves: watching changes no result (a mixed-precision run bit for bit, the
bytes ``torch.save`` writes, generators passed through), every patched attribute is restored, a
failing probe is reported while training goes on, scripted and pickled models still work.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from helpers.rule_loops import conv_bn_net, images, mlp, model_and_momentum_sgd, train_steps, vectors
from torch import nn

import traindoctor


def test_save_writes_the_same_bytes_when_watched(tmp_path: Path) -> None:
    model, opt = model_and_momentum_sgd()
    train_steps(model, opt, steps=1)
    state = {"model": model.state_dict(), "optimizer": opt.state_dict()}
    (tmp_path / "plain").mkdir()
    (tmp_path / "watched").mkdir()
    torch.save(state, tmp_path / "plain" / "ck.pt")  # the archive embeds the file's stem
    with traindoctor.watch():
        torch.save(state, tmp_path / "watched" / "ck.pt")
    assert (tmp_path / "plain" / "ck.pt").read_bytes() == (tmp_path / "watched" / "ck.pt").read_bytes()
    assert torch.save.__module__ == "torch.serialization"  # restored


def test_clip_probe_passes_generators_through_unchanged() -> None:
    model = mlp(norm=False)
    nn.functional.cross_entropy(model(vectors(8)[0]), vectors(8)[1]).backward()
    expected = torch.nn.utils.clip_grad_norm_([p for p in model.parameters()], 1e9)
    with traindoctor.watch(select=["TD302"]):
        got = torch.nn.utils.clip_grad_norm_((p for p in model.parameters()), 1e9)
    assert torch.equal(expected, got)


def _mixed_run(watched: bool) -> tuple[list[float], list[torch.Tensor]]:
    model = mlp(seed=3)
    model.insert(2, nn.Dropout(0.3)) if hasattr(model, "insert") else None
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    losses: list[float] = []
    torch.manual_seed(11)

    def run() -> None:
        for step in range(4):
            x, y = vectors(8, seed=step)
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.functional.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            losses.append(loss.item())
        with torch.no_grad():
            model(vectors(4, seed=9)[0])  # train-mode no-grad forward (TD701 event)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if watched:
            with traindoctor.watch():
                run()
        else:
            run()
    return losses, [p.detach().clone() for p in model.parameters()] + [torch.get_rng_state()]


def test_watched_amp_run_is_bit_for_bit_identical() -> None:
    plain_losses, plain_state = _mixed_run(False)
    watched_losses, watched_state = _mixed_run(True)
    assert plain_losses == watched_losses
    assert all(torch.equal(a, b) for a, b in zip(plain_state, watched_state))


def _patched_namespaces() -> list:
    import torch.amp.autocast_mode
    import torch.backends.cudnn
    import torch.nn.utils.clip_grad
    import torch.optim.lr_scheduler as sched
    from torch.nn.modules.batchnorm import _BatchNorm
    from torch.utils.data.distributed import DistributedSampler

    return [
        nn.Module,
        _BatchNorm,
        nn.SyncBatchNorm,
        nn.Linear,
        nn.Conv1d,
        nn.Conv2d,
        nn.Conv3d,
        nn.ConvTranspose2d,
        nn.Dropout,
        nn.Dropout2d,
        nn.AlphaDropout,
        torch.nn.utils,
        torch.nn.utils.clip_grad,
        type(torch.backends.cudnn),
        torch.amp.autocast_mode.autocast,
        torch.amp.GradScaler,
        sched.LRScheduler,
        sched.ReduceLROnPlateau,
        DistributedSampler,
        torch,
        torch.serialization,
    ]


def test_rule_probes_restore_every_patched_attribute() -> None:
    before = [dict(vars(ns)) for ns in _patched_namespaces()]
    with traindoctor.watch():
        during = [dict(vars(ns)) for ns in _patched_namespaces()]
        model = conv_bn_net()
        train_steps(model, torch.optim.SGD(model.parameters(), lr=0.1), steps=1)
    after = [dict(vars(ns)) for ns in _patched_namespaces()]
    changed = [i for i, (b, d) in enumerate(zip(before, during)) if any(d.get(k) is not v for k, v in b.items())]
    assert len(changed) == len(before)  # every namespace was patched during the watch
    for b, a in zip(before, after):
        assert a.keys() == b.keys() and all(a[k] is v for k, v in b.items())


def test_module_probe_failure_is_reported_and_training_goes_on(monkeypatch) -> None:
    from traindoctor.runtime.probes import modules

    def broken(*args, **kwargs):
        raise RuntimeError("probe bug")

    monkeypatch.setattr(modules.ModuleStats, "record", broken)
    model = conv_bn_net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with traindoctor.watch(select=["TD701"]) as doctor:
        train_steps(model, opt, steps=2)
    assert doctor.step == 2
    assert any("probe modules (forward)" in note and "probe bug" in note for note in doctor.notes)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_scripted_and_pickled_models_still_work_under_watch() -> None:
    import io

    model = conv_bn_net().eval()
    with traindoctor.watch():
        scripted = torch.jit.script(model)  # the patched forwards still compile
        x, _ = images(2)
        assert torch.equal(scripted(x), model(x))
        torch.save(model, io.BytesIO())  # nothing of the doctor is attached to the model
