"""A watched run pays only for the runtime: the static analysis is never imported.

``traindoctor run`` imports every rule module at start-up (their monitors live there); the rules'
static halves import the large static helpers (``checkpoints``, ``loaders``, ``amp``, ...) inside
their checks, so those never load in a watched run. This is a start-up cost every run pays
(about 20 ms of the doctor's ~45 ms before it was split), so a regression is caught here, not in a
benchmark nobody runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

#: Static modules a watched run may import: plain constants and small helpers.
LIGHT = {
    "traindoctor.static",
    "traindoctor.static.vocab",
    "traindoctor.static.names",
    "traindoctor.static.args",
    "traindoctor.static.protocols",
}

DRIVER = textwrap.dedent(
    """
    import json, sys
    from traindoctor.cli import main
    code = main(["run", "--output-format", "json", "-o", "report.json", "train.py"])
    loaded = sorted(m for m in sys.modules if m.startswith(("traindoctor", "tomllib")))
    print(json.dumps({"code": code, "loaded": loaded}))
    """
)

TRAIN = textwrap.dedent(
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(32, 4), torch.randint(0, 2, (32,)))
    for x, y in DataLoader(data, batch_size=8):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    """
)


def _run(tmp_path: Path) -> dict:
    (tmp_path / "train.py").write_text(TRAIN)
    out = subprocess.run(
        [sys.executable, "-c", DRIVER], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_watched_run_imports_no_static_analysis(tmp_path: Path) -> None:
    result = _run(tmp_path)
    assert result["code"] == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["profile"]["steps"] == 4  # it did watch the run
    heavy = [m for m in result["loaded"] if m.startswith("traindoctor.static") and m not in LIGHT]
    assert heavy == []
    # every rule module was imported (the monitors live there) ...
    assert "traindoctor.rules.checkpoint.td501_checkpoint_without_optimizer" in result["loaded"]
    # ... and no TOML parser without a pyproject.toml to read
    assert "tomllib" not in result["loaded"]


def test_rule_examples_are_dedented_when_read_not_when_imported() -> None:
    from traindoctor.rules.base import Invalid, Valid

    valid = Valid("\n    x = 1\n      y = 2\n")
    assert valid._code is None  # nothing done yet
    assert valid.code == "x = 1\n  y = 2\n"
    invalid = Invalid("\n    a  # TD101\n", fixed="\n    b\n")
    assert invalid._done is None
    assert (invalid.code, invalid.fixed, invalid.unsafe_fixed) == ("a  # TD101\n", "b\n", None)
