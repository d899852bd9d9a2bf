"""TD305 grad-scaler-with-bf16: static.

Its runtime tests are in tests/runtime/test_amp_rules.py: they run one mixed-precision CPU loop,
shared with the other AMP rules, whose autocast and clipping lines the findings must point to.
"""

from __future__ import annotations

from helpers.snippets import amp_found, amp_run


def test_td305_silent_when_the_dtype_comes_from_config():
    assert (
        amp_found(
            """
        import torch

        ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
        scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
        with ctx:
            logits, loss = model(X, Y)
        scaler.scale(loss).backward()
        """,
            ["TD305"],
        )
        == []
    )


def test_td305_message_and_position():
    _, result = amp_run(
        """
        import torch

        scaler = torch.amp.GradScaler()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(x).mean()
        scaler.scale(loss).backward()
        """,
        ["TD305"],
    )
    [f] = result.findings
    assert (f.location.row, f.location.column) == (3, 10)
    assert "bfloat16" in f.message and f.message.endswith(".")
