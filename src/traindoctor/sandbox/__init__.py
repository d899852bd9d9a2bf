"""Trials that cannot touch the user's files: the one sandbox of ``tune`` trials and ``verify-resume`` runs.

Each trial runs in a copy-on-write view of the user's folder (:mod:`~traindoctor.sandbox.view`)
with the user's tree read-only at the operating-system level (:mod:`~traindoctor.sandbox.policy`:
Landlock, else bubblewrap, else nothing but with ``--allow-writes``), so that any write,
subprocesses included, lands in the trial's scratch folder or fails; inside the trial,
:mod:`~traindoctor.sandbox.guard` makes Python's writes to the view land on private copies.
"""

from __future__ import annotations

from traindoctor.sandbox.policy import (
    BUBBLEWRAP,
    KINDS,
    LANDLOCK,
    NONE,
    UNSANDBOXED,
    Sandbox,
    SandboxUnavailable,
    choose,
    detect,
)
from traindoctor.sandbox.view import PARENT_LEVELS, View, build

__all__ = [
    "BUBBLEWRAP",
    "KINDS",
    "LANDLOCK",
    "NONE",
    "PARENT_LEVELS",
    "UNSANDBOXED",
    "Sandbox",
    "SandboxUnavailable",
    "View",
    "build",
    "choose",
    "detect",
]
