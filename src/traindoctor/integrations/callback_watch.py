"""The part both framework callbacks share: start a watch session, stop it, publish the report.

A callback cannot wrap the user's code in ``with traindoctor.watch():``; it gets "training
starts" and "training ended" hooks instead. :class:`CallbackWatch` turns those into a
:class:`~traindoctor.runtime.session.Session` (:func:`~traindoctor.doctor.watch.doctor_session`'s)
started and stopped by hand, then publishes the
findings: one line per finding to the framework's Python logger (severity mapped to the log
level), the full text report (evidence, profile) to stderr, and the JSON report to a file when
asked. Only rank 0 publishes.

Under ``traindoctor run`` a session is already watching the whole process: the callback then
stays passive (the command writes the one report), so a script may keep its callback and still be
run either way.

Fail-open like the rest of the doctor: an error while starting, stopping or publishing becomes a
warning on the logger, never an exception in the user's training.
"""

from __future__ import annotations

import atexit
import logging
import sys
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from traindoctor.finding import Finding

_LEVELS = {"error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO}


def finding_line(finding: Finding) -> str:
    """``TD204 weight-decay-on-bias-norm: message [file:row]`` (one log line)."""
    where = ""
    if finding.filename and finding.location is not None:
        where = f" [{finding.filename}:{finding.location.row}]"
    elif finding.filename:
        where = f" [{finding.filename}]"
    return f"traindoctor {finding.code} {finding.name}: {finding.message}{where}"


class CallbackWatch:
    """A watch session driven by a framework's start/end hooks.

    ``options`` are :func:`traindoctor.watch`'s (``select``, ``ignore``, ``thresholds``,
    ``reference_batch``, ``reference_lr``, ``no_decay``); ``report`` is a path for the JSON
    report (or None); ``print_report`` prints the text report to stderr at the end; ``adapt``
    rewrites each finding before it is published (e.g. to name the framework's option in its help).
    """

    def __init__(
        self,
        *,
        report: str | None = None,
        print_report: bool = True,
        adapt: Callable[[Finding], Finding] | None = None,
        **options: Any,
    ) -> None:
        from traindoctor.runtime.options import training_reference

        training_reference(  # a bad declared reference fails when the callback is built
            reference_batch=options.get("reference_batch"),
            reference_lr=options.get("reference_lr"),
            no_decay=options.get("no_decay"),
        )
        self.options = options
        self.report_path = report
        self.print_report = print_report
        self.adapt = adapt
        self.session: Any = None
        self.passive = False
        self.partial = False
        self.findings: list[Finding] = []
        self.report: dict[str, Any] | None = None
        self._atexit_registered = False

    @property
    def running(self) -> bool:
        return self.session is not None and bool(getattr(self.session, "active", False))

    def start(self, logger: logging.Logger) -> None:
        """Start watching (idempotent); passive when another session already watches."""
        if self.running or self.passive:
            return
        try:
            from traindoctor.doctor.watch import doctor_session
            from traindoctor.runtime.session import active_session

            if active_session() is not None:
                self.passive = True  # ``traindoctor run`` (or an outer watch) reports
                return
            self.partial = False
            self.findings, self.report = [], None
            self.session = doctor_session(**self.options)
            self.session.start()
            if not self._atexit_registered:  # a run that dies without an end hook still reports
                ref = weakref.ref(self)
                atexit.register(lambda: (w := ref()) is not None and w.finish(logger, partial=True))
                self._atexit_registered = True
        except Exception as exc:  # fail-open
            logger.warning("traindoctor: could not start watching: %s: %s", type(exc).__name__, exc)
            self.session = None

    def finish(
        self, logger: logging.Logger, *, partial: bool = False, extra: Mapping[str, Any] | None = None
    ) -> list[Finding]:
        """Stop watching and publish; returns the findings (empty when passive or not started)."""
        if not self.running:
            return self.findings
        session = self.session
        try:
            if partial or self.partial:
                session.partial = True
            session.stop()
            self.findings = list(session.findings)
            if self.adapt is not None:
                self.findings = [self.adapt(f) for f in self.findings]
            report = session.report_dict()
            report["findings"] = [f.to_dict() for f in self.findings]
            if extra:
                report["environment"].update(extra)
            self.report = report
        except Exception as exc:  # fail-open
            logger.warning("traindoctor: could not finish watching: %s: %s", type(exc).__name__, exc)
            return self.findings
        if getattr(session, "rank", 0) == 0:
            self.publish(logger)
        return self.findings

    def publish(self, logger: logging.Logger) -> None:
        """Log each finding, print the text report, write the JSON report (fail-open)."""
        try:
            for finding in self.findings:
                logger.log(_LEVELS.get(finding.severity.value, logging.WARNING), finding_line(finding))
            if not self.findings:
                logger.info("traindoctor: no runtime findings")
            from traindoctor.report.run import render_json, render_text

            assert self.report is not None
            if self.report_path:
                with open(self.report_path, "w", encoding="utf-8") as fh:
                    fh.write(render_json(self.report))
            if self.print_report:
                sys.stderr.write("\ntraindoctor report\n" + render_text(self.report))
                sys.stderr.flush()
        except Exception as exc:  # fail-open
            logger.warning("traindoctor: could not write the report: %s: %s", type(exc).__name__, exc)


def severity_counts(findings: Iterable[Finding]) -> dict[str, int]:
    """``{"error": n, "warning": n, "info": n}`` for the framework's metric loggers."""
    counts = {"error": 0, "warning": 0, "info": 0}
    for f in findings:
        counts[f.severity.value] = counts.get(f.severity.value, 0) + 1
    return counts
