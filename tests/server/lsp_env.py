"""The environment a ``traindoctor server`` subprocess runs in (needs no LSP library)."""

from __future__ import annotations

import os
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def server_env(**changes: str | None) -> dict[str, str]:
    """The environment for the server: this checkout's sources first; ``None`` removes a variable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env
