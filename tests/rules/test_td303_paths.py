"""TD303 when ``update()`` follows ``step()`` on some paths only: a wrapper class that skips the
update when the scale is large, an update in one branch of an ``if`` without ``else``."""

from __future__ import annotations

from pathlib import Path

from helpers.project_tree import check, checked_rows

WRAPPER = """
    import torch

    class AmpOptimizer:
        def __init__(self, optimizer, fp16):
            self.optimizer = optimizer
            self.scaler = torch.amp.GradScaler("cuda") if fp16 else None

        def backward_step(self, loss, stepping):
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
            else:
                loss.backward()
            if stepping:
                if self.scaler is not None:
                    self.scaler.step(self.optimizer)
                    scale = self.scaler.get_scale()
                    {update}
                else:
                    self.optimizer.step()
                self.optimizer.zero_grad(set_to_none=True)
    """


def test_update_skipped_on_one_branch_after_the_step(tmp_path: Path) -> None:
    one_branch = WRAPPER.format(
        update="if scale > 32768.0:\n                        pass\n                    else:\n                        self.scaler.update()"
    )
    result = check(tmp_path / "a", {"amp_sc.py": one_branch}, "amp_sc.py", ["TD303"])
    assert [(f.code, f.location.row) for f in result.findings] == [("TD303", 15)]
    finding = result.findings[0]
    assert "`self.scaler.update()` on some paths only" in finding.message
    (related,) = finding.related
    assert related.location.row == 20 and "under a condition" in related.message
    no_else = WRAPPER.format(update="if scale <= 32768.0:\n                        self.scaler.update()")
    assert checked_rows(tmp_path / "b", {"amp_sc.py": no_else}, "amp_sc.py", ["TD303"]) == [("TD303", 15)]


def test_update_on_every_path_is_silent(tmp_path: Path) -> None:
    cases = [
        "self.scaler.update()",
        "if scale > 32768.0:\n                        self.scaler.update(new_scale=32768.0)\n"
        "                    else:\n                        self.scaler.update()",
        "try:\n                        pass\n                    finally:\n                        self.scaler.update()",
    ]
    for i, update in enumerate(cases):
        assert (
            checked_rows(tmp_path / str(i), {"amp_sc.py": WRAPPER.format(update=update)}, "amp_sc.py", ["TD303"]) == []
        )


def test_several_optimizers_stepped_in_a_loop_then_one_update(tmp_path: Path) -> None:
    script = """
        import torch

        scaler = torch.amp.GradScaler("cuda")

        def train_step(losses, optimizers):
            for loss in losses:
                scaler.scale(loss).backward()
            for opt in optimizers:
                scaler.step(opt)
            {after}
        """
    assert checked_rows(tmp_path / "a", {"t.py": script.format(after="scaler.update()")}, "t.py", ["TD303"]) == []
    flagged = script.format(after="if len(optimizers) > 1:\n                scaler.update()")
    assert checked_rows(tmp_path / "b", {"t.py": flagged}, "t.py", ["TD303"]) == [("TD303", 9)]
