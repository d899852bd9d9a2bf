"""TD201 batch-not-multiple-of-8: Batch size (literal or argparse default) is not a multiple of 8 in a script that trains on CUDA."""

from __future__ import annotations

from traindoctor.finding import Severity
from traindoctor.rules.base import Invalid, Rule, Valid  # noqa: F401


class BatchNotMultipleOf8(Rule):
    code = "TD201"
    name = "batch-not-multiple-of-8"
    severity = Severity.INFO
    summary = "Batch size (literal or argparse default) is not a multiple of 8 in a script that trains on CUDA."
    gpu_only = True
    static = True
    runtime = True
