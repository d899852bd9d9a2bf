"""``inspect_checkpoint``: what a checkpoint holds and what a resumable one lacks (TD501-TD504).

Nothing in the checkpoint is executed or imported. A torch file is read by
:mod:`traindoctor.checkpoint.file_inspect`, a ``torch.distributed.checkpoint`` directory by
:mod:`traindoctor.checkpoint.dcp_inspect`; both describe it as an :class:`Inspection` whose
``findings`` are the gaps a resume from it would have (:class:`Gap`, by rule code; see
:mod:`traindoctor.checkpoint.inspection`).
"""

from __future__ import annotations

import os

from traindoctor.checkpoint.dcp_inspect import inspect_dcp, is_dcp_dir
from traindoctor.checkpoint.file_inspect import inspect_file
from traindoctor.checkpoint.inspection import CheckpointReadError, Component, Gap, Inspection
from traindoctor.checkpoint.limits import Budget, LimitExceeded, Limits
from traindoctor.checkpoint.pickle_values import Call, Opaque


def inspect_checkpoint(path: str | os.PathLike[str], limits: Limits | None = None) -> Inspection:
    """Describe ``path`` without executing anything from it, within ``limits``.

    Raises :class:`CheckpointReadError` for files that are not readable checkpoints (missing,
    truncated, corrupt, legacy format, not a regular file) and its subclass
    :class:`LimitExceeded` for one that would cost more than ``limits`` allow; an unsafe file is
    *described*, with ``unsafe`` listing the globals outside the weights_only allowlist.
    """
    name = os.fspath(path)
    budget = Budget(limits)
    if os.path.isdir(name):
        if not is_dcp_dir(name):
            raise CheckpointReadError(
                "a directory, but not a torch.distributed.checkpoint one (no .metadata, no .distcp files)"
            )
        return inspect_dcp(name, budget)
    return inspect_file(name, budget)


__all__ = [
    "Call",
    "CheckpointReadError",
    "Component",
    "Gap",
    "Inspection",
    "LimitExceeded",
    "Limits",
    "Opaque",
    "inspect_checkpoint",
]
