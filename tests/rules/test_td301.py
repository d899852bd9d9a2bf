"""TD301 fp16-without-grad-scaler: static.

Its runtime tests are in tests/runtime/test_amp_rules.py: they run one mixed-precision CPU loop,
shared with the other AMP rules, whose autocast and clipping lines the findings must point to.
"""

from __future__ import annotations

import textwrap

from helpers.snippets import amp_found, amp_run, findings, found


def test_td301_reports_the_autocast_with_position_and_message():
    src, result = amp_run(
        """
        import torch

        def train(model, loader, optimizer):
            for x, y in loader:
                with torch.autocast("cuda"):
                    loss = model(x).mean()
                loss.backward()
                optimizer.step()
        """,
        ["TD301"],
    )
    [f] = result.findings
    assert (f.code, f.location.row, f.location.column) == ("TD301", 5, 14)
    assert "line 7" in f.message and "GradScaler" in f.message
    assert f.fix is None


def test_td301_is_per_function_not_per_file():
    assert amp_found(
        """
        import torch

        scaler = torch.amp.GradScaler("cuda")

        def pretrain(batch):
            with torch.autocast("cuda"):
                loss = model(batch).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()

        def finetune(batch):
            with torch.autocast("cuda"):
                loss = head(model(batch)).mean()
            loss.backward()
            opt.step()
        """,
        ["TD301"],
    ) == [("TD301", 13)]


def test_td301_silent_for_fp16_branch_with_scaler_and_fp32_branch_without():
    # The common "if use_fp16: autocast + scaler, else: plain" shape (seen in real scripts).
    assert (
        amp_found(
            """
        import torch

        def main():
            use_fp16 = cfg.get("fp16", False)
            scaler = torch.cuda.amp.GradScaler() if use_fp16 else None
            for batch in loader:
                if use_fp16:
                    with torch.cuda.amp.autocast():
                        loss = criterion(model(batch), batch) / accum
                    scaler.scale(loss).backward()
                else:
                    loss = criterion(model(batch), batch) / accum
                    loss.backward()
        """,
            ["TD301"],
        )
        == []
    )


def test_td301_silent_when_backward_is_not_of_the_autocast_loss():
    assert (
        amp_found(
            """
        import torch

        for x, y in loader:
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
            with torch.no_grad(), torch.autocast("cuda"):
                preview = model(x_val)
        """,
            ["TD301"],
        )
        == []
    )


def test_td301_unknown_device_reported_only_when_the_file_targets_cuda():
    body = textwrap.dedent(
        """
        import torch

        def step(model, batch, device):
            with torch.autocast(device_type=device.type):
                loss = model(batch).mean()
            loss.backward()
        """
    )
    assert amp_found(body, ["TD301"]) == []
    assert amp_found(body + "\nmodel.cuda()\n", ["TD301"]) == [("TD301", 4)]


def test_td301_inert_grad_scaler_counts_as_no_scaler() -> None:
    inert = """
import torch

def train(model, loader, optimizer, use_amp):
    scaler = torch.cuda.amp.GradScaler(enabled=False)
    for x, y in loader:
        with torch.cuda.amp.autocast(enabled=use_amp):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""
    assert found(inert, ["TD301"]) == [("TD301", 6)]
    # enabled from a flag, rebound elsewhere, or a caller's scaler: not known to be inert
    for variant in (
        inert.replace("enabled=False", "enabled=use_amp"),
        inert.replace("    for x, y", "    scaler = make_scaler()\n    for x, y"),
        inert.replace("use_amp):\n    scaler = torch.cuda.amp.GradScaler(enabled=False)", "use_amp, scaler):"),
    ):
        assert found(variant, ["TD301"]) == [], variant


def test_td301_inert_grad_scaler_passed_to_the_training_function() -> None:
    src = """
import torch

def train_epoch(model, loader, optimizer, scaler):
    for x, y in loader:
        with torch.cuda.amp.autocast():
            loss = model(x).sum()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

def run(model, loader, optimizer):
    scaler = torch.cuda.amp.GradScaler(enabled=False)
    for epoch in range(3):
        train_epoch(model, loader, optimizer, scaler)
"""
    assert found(src, ["TD301"]) == [("TD301", 5)]
    (finding,) = findings(src, ["TD301"])
    assert [r.location.row for r in finding.related if r.location] == [12]  # the construction
    assert "enabled=False" in finding.message
    live = src.replace("run(model, loader, optimizer)", "run(model, loader, optimizer, other)")
    live += "    train_epoch(model, loader, optimizer, other)\n"
    assert found(live, ["TD301"]) == []
