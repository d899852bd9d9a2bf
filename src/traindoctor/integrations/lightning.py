"""``DoctorCallback`` for Lightning (``lightning`` and ``pytorch_lightning``).

::

    from traindoctor.integrations.lightning import DoctorCallback

    trainer = L.Trainer(callbacks=[DoctorCallback()])
    trainer.fit(model)          # python train.py: watched from setup to the end of fit

The watch starts in ``setup(stage="fit")`` (before ``configure_optimizers`` and the dataloaders,
so the optimizer, schedulers and loaders are seen being built) and ends with ``on_fit_end`` (or
``on_exception``, then the report is marked partial). At the end, each finding is
logged to Lightning's logger (``lightning.pytorch`` / ``pytorch_lightning``), the counts go to the
trainer's loggers as ``traindoctor/errors``, ``traindoctor/warnings``, ``traindoctor/infos``,
and the text report is printed. ``callback.findings`` and ``callback.report`` (the JSON report as
a dict) hold the result. Options are :func:`traindoctor.watch`'s plus ``report=PATH`` (write the
JSON report) and ``print_report=False``.

The class derives from the ``Callback`` of every Lightning package installed, so the same
callback object is accepted by ``lightning.Trainer`` and ``pytorch_lightning.Trainer``.
Importing this module without Lightning raises ``ImportError`` saying what to install.
"""

from __future__ import annotations

import logging
from typing import Any

from traindoctor.finding import Finding
from traindoctor.integrations.callback_watch import CallbackWatch, severity_counts


def _callback_bases() -> tuple[type, ...]:
    bases: list[type] = []
    try:
        from lightning.pytorch import Callback as LightningCallback

        bases.append(LightningCallback)
    except ImportError:
        pass
    try:
        from pytorch_lightning import Callback as PLCallback

        if PLCallback not in bases:
            bases.append(PLCallback)
    except ImportError:
        pass
    if not bases:
        raise ImportError(
            "traindoctor.integrations.lightning needs Lightning: pip install lightning "
            "(or pytorch_lightning), with a constraints file pinning your torch version"
        )
    return tuple(bases)


def _framework_logger(trainer: Any) -> logging.Logger:
    package = type(trainer).__module__.split(".", 1)[0]
    root = "pytorch_lightning" if package == "pytorch_lightning" else "lightning.pytorch"
    return logging.getLogger(f"{root}.callbacks.traindoctor")


class _DoctorHooks:
    """The Lightning hooks (mixed into a class derived from the installed ``Callback`` classes)."""

    def __init__(self, *, report: str | None = None, print_report: bool = True, **options: Any) -> None:
        super().__init__()
        self._watch = CallbackWatch(report=report, print_report=print_report, **options)

    @property
    def findings(self) -> list[Finding]:
        """The findings of the last fit (empty before the end, or under ``traindoctor run``)."""
        return self._watch.findings

    @property
    def report(self) -> dict[str, Any] | None:
        """The last fit's JSON report as a dict (findings, profile, environment, notes)."""
        return self._watch.report

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._watch.start(_framework_logger(trainer))

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._watch.start(_framework_logger(trainer))  # no-op when setup() started it

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._watch.partial = True
        self._finish(trainer)  # Lightning does not call the callbacks' teardown after an exception

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish(trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._finish(trainer)  # after an exception on_fit_end is not called

    def _finish(self, trainer: Any) -> None:
        if not self._watch.running:
            return
        logger = _framework_logger(trainer)
        findings = self._watch.finish(logger, extra={"framework": type(trainer).__module__.split(".", 1)[0]})
        if getattr(trainer, "is_global_zero", True):
            counts = severity_counts(findings)
            metrics = {f"traindoctor/{k}s": float(v) for k, v in counts.items()}
            for metric_logger in getattr(trainer, "loggers", None) or []:
                try:
                    metric_logger.log_metrics(metrics, step=int(getattr(trainer, "global_step", 0)))
                except Exception as exc:  # fail-open
                    logger.warning("traindoctor: could not log metrics to %s: %s", type(metric_logger).__name__, exc)


class DoctorCallback(_DoctorHooks, *_callback_bases()):  # type: ignore[misc]  # bases: whichever Lightning is installed
    """Watch a Lightning ``fit`` with the runtime doctor (see the module docstring).

    ``DoctorCallback(report=None, print_report=True, select=None, ignore=None, thresholds=None,
    reference_batch=None, reference_lr=None, no_decay=None)``.
    """


__all__ = ["DoctorCallback"]
