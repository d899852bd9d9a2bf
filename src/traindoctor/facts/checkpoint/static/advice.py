"""The advice TD501, TD502 and TD503 share for a checkpoint that leaves out one object's state.

Both cases are the same for optimizers, LR schedulers and GradScalers; only the object's name and
what a resumed run loses differ, so each rule passes those and reports what is yielded here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from traindoctor.facts.checkpoint.static.checkpoints import TrainingCheckpoints
from traindoctor.facts.checkpoint.static.saves import SaveSite

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.finding import Related
    from traindoctor.static.context import FileContext


def left_out_of_several(
    checkpoints: TrainingCheckpoints, kind: str, plural: str, loss_of_each: str
) -> Iterator[tuple[SaveSite, str, str]]:
    """(save, message, help) for each checkpoint that saves the state of some objects of ``kind``
    but not of others the file builds (:meth:`TrainingCheckpoints.left_out`); ``plural`` names
    them ("LR schedulers"), ``loss_of_each`` is what a resumed run restarts ("the schedule of each")."""
    for site, missing in checkpoints.left_out(kind):
        names = ", ".join(f"`{n}.state_dict()`" for n in missing)
        yield (
            site,
            f"This checkpoint saves the state of some {plural} but not of "
            f"{', '.join(f'`{n}`' for n in missing)}, so a resumed run restarts {loss_of_each}; "
            f"save {names} too.",
            f"Save {names} in the checkpoint",
        )


def left_out_by_helper(checkpoints: TrainingCheckpoints, kind: str, loss: str) -> Iterator[tuple[SaveSite, str, str]]:
    """(save, message, help) for each checkpoint helper handed an object of ``kind`` (or a method
    of an object holding one) that saves the weights and the position without its state (:meth:`TrainingCheckpoints.left_out_by_helper`);
    ``loss`` is what a resumed run restarts ("the schedule")."""
    for site, param in checkpoints.left_out_by_helper(kind):
        if param.startswith("self."):
            said = (
                f"This checkpoint saves the weights and the training position but not the state of "
                f"`{param}`, which the object that saves it holds"
            )
        else:
            said = f"This checkpoint helper is handed `{param}` but saves the weights and the training position without its state"
        yield (
            site,
            f"{said}, so a resumed run restarts {loss}; save `{param}.state_dict()` with them.",
            f"Save `{param}.state_dict()` in the checkpoint",
        )


def via_related(ctx: FileContext, site: SaveSite) -> tuple[Related, ...]:
    """The project helper's save that writes the file, when the save is a call of one (cited
    beside a finding reported at the call)."""
    view = ctx.project
    if site.via is None or view is None:
        return ()
    return tuple(view.related(site.via, "the project helper that writes the checkpoint saves it here"))
