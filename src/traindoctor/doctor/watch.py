"""``traindoctor.watch()``: the public API, and the sessions every driver starts.

``traindoctor.watch()`` is the public entry point::

    with traindoctor.watch() as doctor:
        train()
    print(doctor.findings, doctor.profile)

    @traindoctor.watch(thresholds={"TD102.min_wait_share": 0.3})
    def train(): ...
    train(); train.doctor.findings

The runtime core's :class:`~traindoctor.runtime.session.Session` creates the monitors and installs
the probes it is handed; :func:`doctor_session` hands it the monitors of the enabled rules
(discovered in the rule modules) and every probe of ``traindoctor.runtime.probes``, as
``watch()``, ``traindoctor run``, the framework callbacks and ``tune`` trials all want. A module
that fails to import is left out and named in the session's notes (fail-open).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar, cast

from traindoctor.runtime.events import Monitor
from traindoctor.runtime.options import training_reference
from traindoctor.runtime.session import Installable, Session

F = TypeVar("F", bound=Callable[..., Any])


def doctor_session(
    *,
    select: Iterable[str] | None = None,
    ignore: Iterable[str] | None = None,
    monitors: Iterable[type[Monitor]] | None = None,
    probes: Iterable[type[Installable]] | None = None,
    **options: Any,
) -> Session:
    """A :class:`Session` with the monitors of the codes ``select``/``ignore`` enable and every probe.

    ``monitors`` / ``probes`` replace the discovered classes (tests; ``tune`` trials run no
    monitor). ``options`` are the session's own (``thresholds``, ``device``, ``reference_batch``,
    ...). A bad selector or a module that fails to import becomes an internal-error note.
    """
    errors: list[tuple[str, BaseException]] = []
    if monitors is None:
        try:
            from traindoctor.doctor.monitors import all_monitors
            from traindoctor.registry import select_codes

            monitors = all_monitors(select_codes(list(select) if select is not None else None, list(ignore or [])))
        except Exception as exc:
            errors.append(("monitor discovery", exc))
            monitors = []
    if probes is None:
        from traindoctor.runtime.probes.base import discover_probes

        found, failed = discover_probes()
        probes = found
        errors.extend((f"import {modname}", exc) for modname, exc in failed)
    session = Session(monitors=monitors, probes=probes, **options)
    for where, error in errors:
        session.internal_error(where, error)
    return session


class Watch:
    """``watch()``'s return value: a context manager (yields a fresh :class:`Session`) and a decorator."""

    def __init__(self, report: bool | str = False, **options: Any) -> None:
        """``options``: :func:`doctor_session`'s; ``report``: see :func:`watch`."""
        training_reference(  # a bad declared reference fails here, not in the middle of a run
            reference_batch=options.get("reference_batch"),
            reference_lr=options.get("reference_lr"),
            no_decay=options.get("no_decay"),
        )
        self._options = options
        self._report = report
        self._stack: list[Session] = []
        self.doctor: Session | None = None

    def __enter__(self) -> Session:
        session = doctor_session(**self._options)
        self._stack.append(session)
        self.doctor = session
        session.start()
        return session

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> Literal[False]:
        session = self._stack.pop()
        session.stop(exc_type)
        if self._report and not session.inert:
            emit_report(session, self._report)
        return False

    def __call__(self, func: F) -> F:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self as doctor:
                wrapper.doctor = doctor  # type: ignore[attr-defined]  # a function attribute, set for the caller
                return func(*args, **kwargs)

        wrapper.doctor = None  # type: ignore[attr-defined]  # a function attribute, set for the caller
        return cast(F, wrapper)  # functools.wraps keeps func's signature


def emit_report(session: Session, target: bool | str) -> None:
    """The text report to stderr (``target`` True) or the JSON report to the path ``target`` (fail-open)."""
    try:
        from traindoctor.report.run import render_json, render_text

        if isinstance(target, str):
            with open(target, "w", encoding="utf-8") as fh:
                fh.write(render_json(session.report_dict()))
        else:
            sys.stderr.write(render_text(session.report_dict()))
    except Exception as exc:  # pragma: no cover - fail-open
        sys.stderr.write(f"traindoctor: could not write the report: {exc}\n")


def watch(func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Watch a training run: ``with watch() as doctor:`` or ``@watch()`` / ``@watch``.

    Options: ``select`` / ``ignore`` (codes or prefixes), ``thresholds`` (``{"TD102.min_wait_share":
    0.3}``), ``report`` (``True``: print the text report to stderr at the end; a path: write the
    JSON report there).

    What the run cannot observe, the caller can declare (shorthands for the thresholds of the
    same names; the CLI's ``--reference-batch`` / ``--reference-lr`` / ``--no-decay``):

    - ``reference_batch`` (int): the effective batch the learning rate was tuned for, and
      ``reference_lr`` (float): that learning rate. With both, TD203 reports a run whose
      effective batch differs while its LR is still ``reference_lr``, and TD206 also counts a
      peak LR well above ``reference_lr`` as "large" when asking for warm-up.
    - ``no_decay`` (list of str, or a comma-separated string): the parameter-name patterns the
      script excludes from weight decay, e.g. ``["bias", "bn"]``; TD205 reports patterns that
      match no parameter (a dead filter, so everything is decayed).

    Example: ``with watch(reference_batch=256, reference_lr=0.1) as doctor: train()``. A value
    of the wrong kind raises ``ValueError`` before the run starts.

    For tests: ``device`` (a fake :class:`~traindoctor.runtime.device.DeviceInfo`), ``cpu_count``,
    ``machine_cores``, ``local_world_size``, ``monitors`` / ``probes`` (classes to use instead of
    the discovered ones).
    """
    if func is not None and callable(func):
        return Watch(**options)(func)
    return Watch(**options)
