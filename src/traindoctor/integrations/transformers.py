"""``DoctorCallback`` for the Hugging Face ``Trainer`` (a ``transformers.TrainerCallback``).

::

    from traindoctor.integrations.transformers import DoctorCallback

    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[DoctorCallback()])
    trainer.train()             # python train.py: watched from the Trainer's construction to the end of train

The watch starts when the Trainer is built (``on_init_end``; or at ``on_train_begin`` for a
callback added later), so the optimizer, scheduler and DataLoaders that ``train()`` builds are
seen being built, and ends with ``on_train_end``. At the end each finding is logged to the
``transformers`` logger (``transformers.integrations.traindoctor``; errors and warnings show at the
library's default verbosity) and the text report is printed. A run that raises out of
``train()`` is reported at exit, marked partial. ``callback.findings`` and ``callback.report``
hold the result. Options are :func:`traindoctor.watch`'s plus ``report=PATH`` and
``print_report=False``.

What the Trainer handles itself is not reported: its checkpoints (``optimizer.pt``,
``scheduler.pt``, ``rng_state.pth`` next to the weights), its default optimizer's parameter groups
(biases and LayerNorm are already kept out of weight decay; the audit checks the real groups) and
accelerate's loss scaler. DataLoader advice names the ``TrainingArguments`` to change.
"""

from __future__ import annotations

import logging
from typing import Any, cast

try:
    from transformers import TrainerCallback
except ImportError as exc:  # pragma: no cover - exercised without transformers installed
    raise ImportError(
        "traindoctor.integrations.transformers needs transformers: pip install transformers "
        "accelerate, with a constraints file pinning your torch version"
    ) from exc

from traindoctor.finding import Finding
from traindoctor.integrations.callback_watch import CallbackWatch

#: The ``TrainingArguments`` that set what the DataLoader findings ask for.
LOADER_ARGUMENTS = {
    "TD101": "dataloader_pin_memory=True",
    "TD102": "dataloader_num_workers=N",
    "TD103": "dataloader_persistent_workers=True",
    "TD104": "a smaller dataloader_num_workers",
    "TD105": "more dataloader_num_workers / dataloader_prefetch_factor",
}


def _logger() -> logging.Logger:
    try:
        from transformers.utils import logging as hf_logging

        # transformers types the logging.Logger it returns as a protocol of its own
        return cast(logging.Logger, hf_logging.get_logger("transformers.integrations.traindoctor"))
    except Exception:  # pragma: no cover - very old transformers
        return logging.getLogger("transformers.integrations.traindoctor")


def trainer_help(finding: Finding) -> Finding:
    """The finding with a help line naming the ``TrainingArguments`` option (loader findings)."""
    option = LOADER_ARGUMENTS.get(finding.code)
    if option is None:
        return finding
    hint = f"With the Trainer, set TrainingArguments({option})."
    return finding.with_(help=f"{finding.help} {hint}" if finding.help else hint)


class DoctorCallback(TrainerCallback):
    """Watch a Hugging Face ``Trainer.train()`` with the runtime doctor (see the module docstring)."""

    def __init__(self, *, report: str | None = None, print_report: bool = True, **options: Any) -> None:
        self._watch = CallbackWatch(report=report, print_report=print_report, adapt=trainer_help, **options)

    @property
    def findings(self) -> list[Finding]:
        """The findings of the last ``train()`` (empty before its end, or under ``traindoctor run``)."""
        return self._watch.findings

    @property
    def report(self) -> dict[str, Any] | None:
        """The last ``train()``'s JSON report as a dict."""
        return self._watch.report

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._watch.start(_logger())

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._watch.start(_logger())  # no-op when on_init_end started it

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._watch.finish(_logger(), extra={"framework": "transformers"})


__all__ = ["DoctorCallback"]
