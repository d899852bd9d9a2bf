"""TD302 clip-before-unscale: static.

Its runtime tests are in tests/runtime/test_amp_rules.py: they run one mixed-precision CPU loop,
shared with the other AMP rules, whose autocast and clipping lines the findings must point to.
"""

from __future__ import annotations

from helpers.snippets import amp_found, amp_run

from traindoctor.check.engine import check_source, instantiate
from traindoctor.config import Settings

CLIP_TWICE = """
import torch

def step(loss):
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    torch.nn.utils.clip_grad_value_(model.parameters(), 5.0)
    scaler.step(optimizer)
    scaler.update()
"""


def test_td302_two_clips_get_one_unscale():
    _, result = amp_run(CLIP_TWICE, ["TD302"])
    assert [(f.location.row, f.fix is not None) for f in result.findings] == [(5, True), (6, False)]
    assert "`scaler.unscale_(optimizer)`" in result.findings[0].message
    _, fixed = amp_run(CLIP_TWICE, ["TD302"], fix=True)
    assert fixed.fixed_source == CLIP_TWICE.lstrip("\n").replace(
        "    torch.nn.utils.clip_grad_norm_", "    scaler.unscale_(optimizer)\n    torch.nn.utils.clip_grad_norm_"
    )
    assert fixed.findings == []


def test_td302_fix_keeps_crlf_line_endings():
    src = "import torch\r\nscaler.scale(loss).backward()\r\ntorch.nn.utils.clip_grad_norm_(ps, 1.0)\r\nscaler.step(opt)\r\nscaler.update()\r\n"
    result = check_source(src, "t.py", Settings(), instantiate(["TD302"]), fix=True)
    assert result.fixed_source == src.replace("torch.nn.utils.clip", "scaler.unscale_(opt)\r\ntorch.nn.utils.clip")


def test_td302_no_fix_when_step_takes_an_expression():
    _, result = amp_run(
        """
        import torch

        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        scaler.step(optimizers[0])
        scaler.update()
        """,
        ["TD302"],
    )
    [f] = result.findings
    assert f.location.row == 4 and f.fix is None


def test_td302_silent_without_a_following_scaler_step():
    # Scaled gradients go straight to optimizer.step(): another bug, but not "before unscale_".
    assert (
        amp_found(
            """
        import torch

        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        """,
            ["TD302"],
        )
        == []
    )


def test_td302_accumulation_with_unscale_under_the_same_condition():
    assert (
        amp_found(
            """
        import torch

        def train(self, loader):
            for i, batch in enumerate(loader):
                with torch.amp.autocast("cuda"):
                    loss = self.train_step(batch) / self.accum
                self.scaler.scale(loss).backward()
                if (i + 1) % self.accum == 0:
                    self.scaler.unscale_(self.optimizer)
                    torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm=1.0)
                    self.scaler.step(self.optimizer)
                    self.scaler.update()
        """,
            ["TD302"],
        )
        == []
    )
