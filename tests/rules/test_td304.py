"""TD304 deprecated-amp-api: static."""

from __future__ import annotations

from helpers.snippets import amp_found, amp_run

REAL_TD304 = """
import torch
from torch.cuda.amp import autocast, GradScaler

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

def train(model, data, epochs):
    scaler = GradScaler()
    for single in data:
        with torch.cuda.amp.autocast():
            loss = model(single)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""


def test_td304_fix_on_a_real_shaped_script_is_exact_and_idempotent():
    _, result = amp_run(REAL_TD304, ["TD304"], fix=True)
    assert result.fixed_source == REAL_TD304.lstrip("\n").replace(
        "scaler = GradScaler()", 'scaler = torch.amp.GradScaler("cuda")'
    ).replace("with torch.cuda.amp.autocast():", 'with torch.autocast("cuda"):')
    assert result.findings == []
    _, again = amp_run(result.fixed_source, ["TD304"], fix=True)
    assert again.fixed_source is None


def test_td304_message_help_and_span():
    _, result = amp_run("import torch\nwith torch.cuda.amp.autocast(enabled=amp):\n    pass\n", ["TD304"])
    [f] = result.findings
    assert f.message == '`torch.cuda.amp.autocast(...)` is deprecated; use `torch.autocast("cuda", ...)` instead.'
    assert (f.location.row, f.location.column, f.end_location.column) == (2, 6, 29)
    assert f.fix is not None and f.fix.is_safe


def test_td304_positional_cache_enabled_becomes_keyword():
    src = "import torch\nctx = torch.cuda.amp.autocast(True, torch.float16, False)\n"
    _, result = amp_run(src, ["TD304"], fix=True)
    assert result.fixed_source == (
        'import torch\nctx = torch.autocast("cuda", enabled=True, dtype=torch.float16, cache_enabled=False)\n'
    )


def test_td304_version_gated_fallbacks_are_not_reported():
    assert (
        amp_found(
            """
        import torch

        scaler = torch.amp.GradScaler(device="cuda") if TORCH_2_4 else torch.cuda.amp.GradScaler()
        if is_torch_version(">=", "2.3"):
            s2 = torch.amp.GradScaler("cuda")
        else:
            s2 = torch.cuda.amp.GradScaler()
        """,
            ["TD304"],
        )
        == []
    )


def test_td304_import_inside_a_function_does_not_count_for_the_fix():
    src = """
    from torch.cuda.amp import GradScaler

    def setup():
        import torch
        return torch.zeros(1)

    scaler = GradScaler()
    """
    _, result = amp_run(src, ["TD304"], fix=True)
    assert [f.location.row for f in result.findings] == [7]
    assert result.fixed_source is None


def test_td304_old_torch_minimum():
    src = "import torch\ns = torch.cuda.amp.GradScaler()\nwith torch.cuda.amp.autocast():\n    pass\n"
    assert amp_found(src, ["TD304"], min_torch="2.2") == [("TD304", 3)]
    assert amp_found(src, ["TD304"], min_torch="1.9") == []


def test_a_caller_finding_that_cites_a_reported_site_is_left_out_of_a_run_over_both(tmp_path, monkeypatch):
    """One mistake, one finding: ``check .`` reports the deprecated call in ``engine.py``, not
    again at ``main.py``'s call of the function that holds it; ``check main.py`` alone keeps the
    caller's finding, since nothing else says it (xcit, LeViT, mar: ``main.py`` -> ``engine.py``)."""
    import json
    from pathlib import Path

    from traindoctor.check.cli import main as check_main

    (tmp_path / "engine.py").write_text(
        "import torch\n\n\ndef train_one_epoch(model, loader, opt):\n"
        "    for x, y in loader:\n        with torch.cuda.amp.autocast():\n"
        "            loss = model(x).sum()\n        loss.backward()\n        opt.step()\n"
    )
    (tmp_path / "main.py").write_text(
        "import torch\nfrom engine import train_one_epoch\n\n"
        "model = torch.nn.Linear(2, 2).cuda()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(3):\n    train_one_epoch(model, [], opt)\n"
    )
    monkeypatch.chdir(tmp_path)

    def rows(*paths: str) -> list[tuple[str, int]]:
        check_main([*paths, "--select", "TD304", "--no-cache", "--output-format", "json", "-o", "o.json"])
        return sorted((f["filename"], f["location"]["row"]) for f in json.loads(Path("o.json").read_text()))

    assert rows(".") == [("engine.py", 6)]
    assert rows("main.py") == [("main.py", 7)]
