"""Small helpers shared by the rule probes and monitors: call sites, per-session state, emitting.

* :func:`user_site` finds the line of *user* code that caused an event (the first frame outside
  torch, traindoctor and the standard library's plumbing), so a runtime finding can point at the
  ``GradScaler(...)`` or ``torch.save(...)`` line. It walks the stack: call it once per
  construction or per rare event, never per step.
* :func:`forward_call_site` finds the line that called the *outermost* module, i.e. the
  ``model(x)`` line of an evaluation loop rather than a line inside ``model.forward``.
* :func:`session_state` gives probes and monitors one shared, per-session dictionary (for
  aggregated statistics that are too hot to emit as events).

This module must not import torch at module level (rule modules import it lazily).
"""

from __future__ import annotations

import os
import sys
from types import FrameType
from typing import Any, Callable, TypeVar

#: A call site: (filename, row). ``None`` when only library code is on the stack.
Site = tuple[str, int]

T = TypeVar("T")

_SKIP_PARTS = (
    os.sep + "torch" + os.sep,
    os.sep + "traindoctor" + os.sep,
    os.sep + "contextlib.py",
    os.sep + "functools.py",
    os.sep + "runpy.py",
    os.sep + "typing.py",
)


def _is_library(filename: str) -> bool:
    if filename.startswith("<frozen"):
        return True
    return any(part in filename for part in _SKIP_PARTS)


def _first_user_frame(frame: FrameType | None) -> Site | None:
    """(filename, row) of ``frame`` or the nearest caller outside torch and traindoctor."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if not _is_library(filename):
            return (filename, frame.f_lineno)
        frame = frame.f_back
    return None


def user_site(skip: int = 1) -> Site | None:
    """(filename, row) of the innermost frame that belongs to user code, or None."""
    return _first_user_frame(sys._getframe(skip))


_MODULE_CALL = {"_call_impl", "_wrapped_call_impl"}


def forward_call_site(skip: int = 1) -> Site | None:
    """(filename, row) of the user line that called the outermost ``nn.Module``.

    Walks outwards from the current frame; every ``Module.__call__`` frame moves the mark, so the
    result is the caller of the root module (``model(x)``), not a line inside its ``forward``.
    Falls back to :func:`user_site` when no module call is on the stack.
    """
    frame: FrameType | None = sys._getframe(skip)
    outer: FrameType | None = None
    while frame is not None:
        code = frame.f_code
        if code.co_name in _MODULE_CALL and code.co_filename.endswith(
            os.path.join("nn", "modules", "module.py")
        ):
            outer = frame
        frame = frame.f_back
    if outer is None:
        return user_site(skip + 1)
    return _first_user_frame(outer.f_back)


def site_kwargs(site: Site | None) -> dict[str, Any]:
    """``filename``/``row`` keyword arguments for :meth:`Monitor.report`."""
    if not site:
        return {}
    return {"filename": site[0], "row": site[1]}


def session_state(session: Any, key: str, factory: Callable[[], T]) -> T:
    """The per-session object stored under ``key``, created by ``factory()`` on first use."""
    store = getattr(session, "_td_live_state", None)
    if store is None:
        store = {}
        try:
            setattr(session, "_td_live_state", store)
        except Exception:  # pragma: no cover - a session that refuses attributes
            return factory()
    if key not in store:
        store[key] = factory()
    return store[key]


def emit(session: Any, hook: str, *args: Any, **kwargs: Any) -> None:
    """Emit ``hook`` through the session (which catches monitor errors: fail-open)."""
    if session is not None:
        session.emit(hook, *args, **kwargs)


def is_compiling() -> bool:
    """True while torch.compile/dynamo traces (probes must then stay out of the way)."""
    try:
        import torch

        return bool(torch.compiler.is_compiling())
    except Exception:  # pragma: no cover - very old torch
        return False


def describe_path(f: Any) -> str | None:
    """A printable path for ``torch.save``'s target, or None for an unnamed in-memory buffer.

    The temporary file of an atomic write (``.last.pt.tmp-<pid>-<hex>``, as
    ``traindoctor.checkpoint`` writes it) is reported under its final name (``last.pt``).
    """
    if isinstance(f, (str, bytes, os.PathLike)):
        try:
            path = os.fsdecode(f)
        except Exception:  # pragma: no cover
            path = str(f)
    else:
        name = getattr(f, "name", None)
        if not isinstance(name, (str, bytes)):
            return None
        path = os.fsdecode(name)
    folder, base = os.path.split(path)
    if base.startswith(".") and ".tmp-" in base:
        path = os.path.join(folder, base[1:].split(".tmp-", 1)[0])
    return path
