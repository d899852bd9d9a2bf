"""Checkpoint facts of ``torch.distributed.checkpoint`` (dcp.save/async_save/load, get_state_dict and
its getters) and of accelerate's ``save_state``, as TD501-TD505 read them.
"""

from __future__ import annotations

import textwrap

from traindoctor.check.engine import check_source, instantiate
from traindoctor.config import Settings

TRAIN = """
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict, get_optimizer_state_dict, get_state_dict, set_state_dict,
)

model = torch.nn.Linear(4, 4)
optimizer = torch.optim.AdamW(model.parameters())
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 10)

def train(loader):
    for epoch in range(3):
        for x, y in loader:
            model(x).sum().backward()
            optimizer.step()
            scheduler.step()
        {save}
"""


CODES = ["TD501", "TD502", "TD503", "TD504", "TD505"]


def run(source: str, codes: list[str] = CODES):
    result = check_source(textwrap.dedent(source), "train.py", Settings(min_torch_version="2.13"), instantiate(codes))
    assert not result.internal_errors, result.internal_errors
    return result.findings


def found(source: str) -> list[tuple[str, int]]:
    return sorted((f.code, f.location.row) for f in run(source))


def test_dcp_save_of_model_optimizer_scheduler_and_rng_is_complete():
    save = (
        'msd, osd = get_state_dict(model, optimizer); dcp.save({"model": msd, "optim": osd, '
        '"sched": scheduler.state_dict(), "rng": torch.get_rng_state(), "epoch": epoch}, '
        'checkpoint_id=f"ckpt/{epoch}")'
    )
    assert found(TRAIN.format(save=save)) == []


def test_dcp_getters_without_unpacking_are_understood():
    save = (
        'dcp.save({"model": get_model_state_dict(model), '
        '"optim": get_optimizer_state_dict(model, optimizer), "sched": scheduler.state_dict(), '
        '"rng": torch.get_rng_state(), "epoch": epoch}, checkpoint_id="ckpt")'
    )
    assert found(TRAIN.format(save=save)) == []


def test_model_only_dcp_save_is_td501_and_its_message_names_the_dcp_getter():
    save = 'dcp.save({"model": get_model_state_dict(model)}, checkpoint_id=f"ckpt/{epoch}")'
    source = TRAIN.format(save=save)
    codes = {code for code, _ in found(source)}
    assert codes == {"TD501"}  # a bare weights save: TD501 alone (TD502 needs resume state beside it)
    (f,) = run(source, ["TD501"])
    assert "get_optimizer_state_dict(model, optimizer)" in f.message
    assert f.location.row == 18


def test_dcp_async_save_counts_like_save():
    save = 'dcp.async_save({"model": get_model_state_dict(model)}, checkpoint_id="ckpt")'
    assert ("TD501", 18) in found(TRAIN.format(save=save))


def test_dcp_load_that_skips_the_saved_optimizer_is_td505_and_a_full_one_is_not():
    save = (
        'msd, osd = get_state_dict(model, optimizer); dcp.save({"model": msd, "optim": osd, '
        '"sched": scheduler.state_dict(), "rng": torch.get_rng_state(), "epoch": epoch}, '
        'checkpoint_id="ckpt")'
    )
    partial = TRAIN.format(save=save) + textwrap.dedent("""
        def resume():
            msd, osd = get_state_dict(model, optimizer)
            state = {"model": msd}
            dcp.load(state, checkpoint_id="ckpt")
            set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict={})
        """)
    assert ("TD505", 23) in found(partial)
    full = TRAIN.format(save=save) + textwrap.dedent("""
        def resume():
            msd, osd = get_state_dict(model, optimizer)
            state = {"model": msd, "optim": osd, "sched": scheduler.state_dict()}
            dcp.load(state, checkpoint_id="ckpt")
            set_state_dict(model, optimizer, model_state_dict=state["model"],
                           optim_state_dict=state["optim"])
            scheduler.load_state_dict(state["sched"])
        """)
    assert not [c for c, _ in found(full) if c == "TD505"]


def test_accelerator_save_state_is_a_complete_checkpoint():
    source = """
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator()
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    for step, (x, y) in enumerate(loader):
        accelerator.backward(model(x).sum())
        optimizer.step()
        if step % 100 == 0:
            accelerator.save_state(f"ckpt/{step}")
            torch.save(model.state_dict(), "weights.pt")
    """
    assert found(source) == []
