"""TD303 scaler-never-updated: static."""

from __future__ import annotations

from helpers.snippets import amp_found, amp_run


def test_td303_position_and_message():
    _, result = amp_run(
        """
        import torch

        scaler = torch.amp.GradScaler("cuda")
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        """,
        ["TD303"],
    )
    [f] = result.findings
    assert (f.location.row, f.location.column) == (5, 1)
    assert "`scaler.update()`" in f.message


def test_td303_silent_for_unknown_objects_with_step():
    assert (
        amp_found(
            """
        def train(engine, sched, opt):
            engine.step(opt)     # a framework's own step
            sched.step()
            opt.step()
        """,
            ["TD303"],
        )
        == []
    )


def test_td303_returned_scaler_may_be_updated_by_the_caller():
    assert (
        amp_found(
            """
        import torch

        def make(opt):
            scaler = torch.amp.GradScaler()
            scaler.step(opt)
            return scaler
        """,
            ["TD303"],
        )
        == []
    )
