"""TD307 backward-inside-autocast: static."""

from __future__ import annotations

from helpers.snippets import amp_found


def test_td307_reports_each_backward_inside_nested_regions_once():
    assert amp_found(
        """
        import torch

        with torch.autocast("cuda", dtype=torch.bfloat16):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x).mean()
                loss.backward()
            aux = model(z).mean()
            aux.backward()
        """,
        ["TD307"],
    ) == [("TD307", 6), ("TD307", 8)]
