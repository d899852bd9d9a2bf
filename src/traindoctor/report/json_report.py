"""JSON: an array of findings with ruff's field names where ruff has them."""

from __future__ import annotations

import json

from traindoctor.finding import Finding


def render(findings: list[Finding]) -> str:
    return json.dumps([f.to_dict() for f in findings], indent=2, sort_keys=False) + "\n"
