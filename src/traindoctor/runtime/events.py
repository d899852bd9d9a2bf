"""The typed hooks runtime rules subscribe to: probes emit, monitors judge.

Probes (``traindoctor.runtime.probes``) are thin adapters on torch that record what happens and
call these hooks on every active :class:`Monitor`. A monitor is the runtime half of a rule: it
overrides the few hooks it needs (all are no-ops here, as Lightning's ``Callback``) and reports
findings with measured evidence, usually at :meth:`Monitor.on_run_end`.

Hooks run on the training hot path: keep them cheap (record numbers, decide at the end).
This module must not import torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from traindoctor.finding import Finding, Location, Origin

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.rules.base import Rule


class Monitor:
    """Base class of the runtime half of a rule. Subclass it in the rule's own module."""

    #: The rule class (metadata and docs) this monitor reports for.
    rule: ClassVar["type[Rule]"]

    def __init__(self, session: Any) -> None:
        self.session = session
        self.findings: list[Finding] = []

    # ---------------------------------------------------------------- helpers
    def threshold(self, key: str, default: Any) -> Any:
        """A configurable threshold: ``thresholds = {"TD102.min_wait_share": 0.3}`` or by key."""
        cfg = getattr(self.session, "thresholds", {}) or {}
        return cfg.get(f"{self.rule.code}.{key}", cfg.get(key, default))

    def report(
        self,
        message: str,
        *,
        evidence: Mapping[str, Any] | None = None,
        step: int | None = None,
        filename: str = "",
        row: int | None = None,
        help: str | None = None,
    ) -> Finding:
        finding = Finding(
            code=self.rule.code,
            name=self.rule.name,
            severity=self.rule.severity,
            message=message,
            filename=filename,
            location=Location(row, 1) if row else None,
            origin=Origin.RUNTIME,
            help=help,
            evidence=dict(evidence or {}),
            step=step,
        )
        self.findings.append(finding)
        return finding

    # ---------------------------------------------------------------- run
    def on_run_start(self) -> None:
        """Called when the watch starts, before any user code runs."""

    def on_run_end(self) -> None:
        """Called once when the watch ends (normally, on exception or on Ctrl-C)."""
