"""The probe base class and probe discovery.

A probe is a thin adapter on torch: it patches the minimum needed (or registers a public hook),
records what happens and emits events through the session. Probes never decide anything: the
monitors (runtime halves of rules) do. Every patch goes through :meth:`Probe.patch` and every hook
handle through :meth:`Probe.keep_handle`, so :meth:`Probe.uninstall` restores the exact original
attributes (including "the attribute was inherited, not set on this class").

Probes are discovered by walking the ``traindoctor.runtime.probes`` package, like rules: adding a
probe means adding one module with one :class:`Probe` subclass.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from traindoctor.discover import classes_defined_in

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.runtime.session import Session

_MISSING = object()


class Probe:
    """Base class of every probe. Subclasses override :meth:`install` (and rarely ``uninstall``)."""

    #: Short name used in internal notes.
    name: ClassVar[str] = ""
    #: Install order (lower first); uninstall runs in reverse.
    order: ClassVar[int] = 100

    def __init__(self) -> None:
        self.session: Session | None = None
        self._patches: list[tuple[Any, str, Any]] = []
        self._handles: list[Any] = []

    # ---------------------------------------------------------------- lifecycle
    def applies(self, session: Session) -> bool:
        """Whether this probe is useful for this run (e.g. the transfer probe needs CUDA)."""
        return True

    def install(self, session: Session) -> None:
        """Patch / hook torch. Called once when the watch starts."""
        self.session = session

    def uninstall(self) -> None:
        """Undo every patch and remove every hook, newest first. Safe to call twice."""
        while self._handles:
            handle = self._handles.pop()
            try:
                handle.remove()
            except Exception:  # pragma: no cover - torch removed it already
                pass
        while self._patches:
            _restore(*self._patches.pop())

    # ---------------------------------------------------------------- helpers
    def patch(self, owner: Any, attr: str, make: Callable[[Any], Any]) -> None:
        """Replace ``owner.attr`` by ``make(current_value)``; restored exactly on uninstall.

        The raw entry of ``owner.__dict__`` is saved (so staticmethods stay staticmethods), or a
        marker meaning "inherited": uninstall then deletes the attribute instead of setting it.
        """
        own = vars(owner).get(attr, _MISSING)
        current = getattr(owner, attr)
        setattr(owner, attr, make(current))
        self._patches.append((owner, attr, own))

    def unpatch(self, owner: Any, attr: str) -> None:
        """Restore one attribute :meth:`patch` replaced (before ``uninstall``: a probe that
        patches only while it needs to). Nothing happens if it is not patched."""
        for i in range(len(self._patches) - 1, -1, -1):
            if self._patches[i][0] is owner and self._patches[i][1] == attr:
                _restore(*self._patches.pop(i))
                return

    def keep_handle(self, handle: Any) -> Any:
        """Remember a torch ``RemovableHandle`` (or anything with ``remove()``) for uninstall."""
        self._handles.append(handle)
        return handle

    @property
    def watched(self) -> Session:
        """The session :meth:`install` was given (the hooks a probe registers run only after it)."""
        session = self.session
        if session is None:
            raise RuntimeError(f"probe {self.name or type(self).__name__} is not installed")
        return session

    def emit(self, hook: str, *args: Any, **kwargs: Any) -> None:
        """Emit ``hook`` through the session, if installed (the session catches monitor errors)."""
        if self.session is not None:
            self.session.emit(hook, *args, **kwargs)

    def fail(self, where: str, exc: BaseException) -> None:
        """Record an internal error of this probe (fail-open: the user's call already happened)."""
        if self.session is not None:
            self.session.internal_error(f"probe {self.name or type(self).__name__} ({where})", exc)


def _restore(owner: Any, attr: str, original: Any) -> None:
    """Put back ``owner.attr`` as :meth:`Probe.patch` found it (or delete it: it was inherited)."""
    if original is _MISSING:
        try:
            delattr(owner, attr)
        except AttributeError:  # pragma: no cover
            pass
    else:
        setattr(owner, attr, original)


def _iter_probe_modules() -> list[str]:
    import traindoctor.runtime.probes as pkg

    names = []
    for info in pkgutil.iter_modules(pkg.__path__, prefix=pkg.__name__ + "."):
        if info.name.rsplit(".", 1)[-1] not in ("base",) and not info.ispkg:
            names.append(info.name)
    return sorted(names)


def discover_probes() -> tuple[list[type[Probe]], list[tuple[str, BaseException]]]:
    """Probe classes in install order, and the modules that failed to import."""
    found: list[type[Probe]] = []
    errors: list[tuple[str, BaseException]] = []
    for modname in _iter_probe_modules():
        try:
            module = importlib.import_module(modname)
        except Exception as exc:
            errors.append((modname, exc))
            continue
        found.extend(p for p in classes_defined_in(module, Probe) if not vars(p).get("abstract", False))
    found.sort(key=lambda cls: (cls.order, cls.__module__, cls.__name__))
    return found, errors
