"""Inputs for the HTML report tests: a real ``traindoctor run`` report, a tune result of the
shape ``traindoctor tune --output-format json`` prints, and a verify-resume result."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

#: A loop that waits for its data in the main process: TD102 fires, the profile is data-bound.
SLOW_LOOP = textwrap.dedent(
    """
    import time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Slow(Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            time.sleep(0.002)
            return torch.ones(4) * i, torch.zeros(1)

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Slow(), batch_size=4)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    """
)


def run_report(folder: Path, *extra: str) -> tuple[int, dict[str, Any], Path]:
    """Run SLOW_LOOP under ``traindoctor run`` with ``extra`` options; (exit code, report, script)."""
    from traindoctor.doctor.cli import main

    script = folder / "slow_train.py"
    script.write_text(SLOW_LOOP)
    out = folder / "report.json"
    code = main(["--output-format", "json", "-o", str(out), "--select", "TD102", *extra, str(script)])
    return code, json.loads(out.read_text()), script


def _trial(
    phase: str, workers: int, threads: int, rate: float, wait: float | None, verdict: str, **more: Any
) -> dict[str, Any]:
    config = {
        "num_workers": workers,
        "prefetch_factor": more.pop("prefetch_factor", None),
        "persistent_workers": workers > 0,
        "torch_threads": threads,
    }
    return {"config": config, "phase": phase, "samples_per_s": rate, "data_wait_share": wait, "verdict": verdict}


def tune_result() -> dict[str, Any]:
    """A hand-made tune result: 0 workers starve the model; 2 workers and 1 thread win."""
    trials = [
        _trial("baseline", 0, 2, 301.0, 0.9, "data-bound (main process)"),
        _trial("bound-loader", 1, 2, 310.0, None, "loader alone"),
        _trial("bound-loader", 2, 2, 590.0, None, "loader alone"),
        _trial("bound-compute", 0, 1, 1450.0, None, "compute alone on cached batches"),
        _trial("bound-compute", 0, 2, 1390.0, None, "compute alone on cached batches"),
        _trial("search", 1, 1, 296.0, 0.78, "data-bound (workers)"),
        _trial("search", 2, 1, 572.0, 0.05, "compute-bound", prefetch_factor=2),
        _trial("search", 2, 2, 505.0, 0.12, "compute-bound", prefetch_factor=2),
        _trial("confirm", 2, 1, 575.0, 0.04, "compute-bound", prefetch_factor=2),
        _trial("confirm", 0, 2, 299.0, 0.9, "data-bound (main process)"),
    ]
    best = trials[-2]
    return {
        "script": "examples/runtime/slow_pipeline.py",
        "baseline": {"config": trials[0]["config"], "samples_per_s": 301.0},
        "recommended": {"num_workers": 2, "prefetch_factor": 2, "persistent_workers": True, "torch_threads": 1},
        "best": best,
        "speedup": 575.0 / 301.0,
        "limit": {
            "samples_per_s": 590.0,
            "bound": "loader",
            "detail": "2 workers load 590 samples/s alone; compute alone runs 1450 samples/s",
        },
        "bottleneck_before": "data-bound (main process)",
        "bottleneck_after": "compute-bound",
        "trials": trials,
    }


def resume_result(exact: bool = False) -> dict[str, Any]:
    """A verify-resume result of the shape ``resume.result.result_dict`` returns."""
    ref = {str(s): 2.0 / s for s in range(1, 11)}
    resumed = {str(s): (2.0 / s if exact or s < 8 else 2.0 / s + 0.05) for s in range(7, 11)}
    return {
        "exact": exact,
        "summary": ("resume is exact: 10 steps, per-step losses and final model/optimizer state identical (bitwise)")
        if exact
        else "resume is NOT exact: first divergent step 8: loss 0.3 after resume, 0.25 uninterrupted",
        "checkpoint_step": 6,
        "first_divergent_step": None if exact else 8,
        "cause": None if exact else "optimizer state lost (momentum/moments zero after resume)",
        "explanation": None if exact else "the resumed optimizer held no state at step 7",
        "also": [],
        "notes": [],
        "script": "train.py",
        "steps": 10,
        "interrupt_at": 5,
        "tolerance": 0.0,
        "losses": {"reference": ref, "interrupted": {k: v for k, v in ref.items() if int(k) <= 6}, "resumed": resumed},
    }
