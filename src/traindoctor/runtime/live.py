"""Small helpers shared by the rule probes and monitors: call sites, per-session state, emitting.

* :func:`user_site` finds the line of *user* code that caused an event (the first frame outside
  torch, traindoctor and the standard library's plumbing), so a runtime finding can point at the
  ``GradScaler(...)`` or ``torch.save(...)`` line. It walks the stack: call it once per
  construction or per rare event, never per step.
* :func:`forward_call_site` finds the line that called the *outermost* module, i.e. the
  ``model(x)`` line of an evaluation loop rather than a line inside ``model.forward``.
* :func:`session_state` gives probes and monitors one shared, per-session dictionary (for
  aggregated statistics that are too hot to emit as events); :func:`save_cache` is the part of it
  that lives for one ``torch.save``.
* :func:`fields_repr` writes the ``ClassName(field=value, ...)`` repr of the runtime's small
  record classes (plain classes with ``__slots__``: a ``@dataclass`` costs start-up time).

This module must not import torch at module level (rule modules import it lazily).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any, TypeVar, cast

T = TypeVar("T")

#: The folder of the ``traindoctor`` package (this file is ``traindoctor/runtime/live.py``).
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Site(tuple[str, int]):
    """A call site: ``(filename, row)``, plus ``.column`` (1-based, in characters) when known.

    A 2-tuple, so ``filename, row = site`` and comparisons work as before; the column rides along
    as an attribute.
    """

    column: int | None

    def __new__(cls, filename: str, row: int, column: int | None = None) -> Site:
        site = super().__new__(cls, (filename, row))
        site.column = column
        return site


def _library_roots() -> tuple[str, ...]:
    """Real folders whose files are library code: installed packages, the standard library,
    traindoctor itself and torch. Decided by where modules live, never by words in a path."""
    import site
    import sysconfig

    roots: list[str] = []
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib", "scripts"):
        if paths.get(key):
            roots.append(paths[key])
    try:
        roots.extend(site.getsitepackages())
    except Exception:  # pragma: no cover - embedded interpreters
        pass
    try:
        roots.append(site.getusersitepackages())
    except Exception:  # pragma: no cover
        pass
    for entry in sys.path:
        if os.path.basename(entry.rstrip(os.sep)) in ("site-packages", "dist-packages"):
            roots.append(entry)
    roots.append(PACKAGE_DIR)
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        roots.append(os.path.dirname(os.path.abspath(torch_file)))
    out = []
    for root in roots:
        try:
            real = os.path.realpath(root)
        except (OSError, ValueError):  # pragma: no cover
            continue
        out.append(real.rstrip(os.sep) + os.sep)
    return tuple(sorted(set(out), key=len, reverse=True))


_ROOTS: tuple[str, ...] | None = None
_KIND: dict[str, bool] = {}


def is_library_file(filename: str) -> bool:
    """Whether code from ``filename`` is library code (not the user's), cached per filename.

    Library code is what lives under an installed-packages folder (``site-packages``), the
    standard library, the interpreter's scripts folder (console scripts such as the
    ``traindoctor`` executable), or the real folders of the ``traindoctor`` and ``torch``
    packages, plus generated code (``<frozen ...>``, ``<string>``...). A user's script in a folder that happens
    to be called ``torch`` or ``traindoctor`` stays user code.
    """
    known = _KIND.get(filename)
    if known is not None:
        return known
    global _ROOTS
    if filename.startswith("<"):
        result = filename != "<stdin>"
    else:
        if _ROOTS is None:
            _ROOTS = _library_roots()
        try:
            real = os.path.realpath(filename)
        except (OSError, ValueError):  # pragma: no cover
            real = filename
        result = real.startswith(_ROOTS)
    if len(_KIND) < 65536:
        _KIND[filename] = result
    return result


def _column(frame: FrameType) -> tuple[int, int | None]:
    """(row, 1-based character column) of the expression ``frame`` is executing."""
    row = frame.f_lineno
    if sys.version_info < (3, 11):  # pragma: no cover - no position info before Python 3.11
        return row, None
    try:
        import itertools

        pos = next(itertools.islice(frame.f_code.co_positions(), frame.f_lasti // 2, None))
    except Exception:  # pragma: no cover - no position info
        return row, None
    start_row, _end_row, col, _end_col = pos
    if start_row is None or col is None:
        return row, None
    import linecache

    line = linecache.getline(frame.f_code.co_filename, start_row)
    if line:
        try:
            col = len(line.encode("utf-8")[:col].decode("utf-8", errors="replace"))
        except Exception:  # pragma: no cover
            pass
    return start_row, col + 1


_SITES: dict[tuple[int, int], tuple[Any, Site]] = {}


def frame_site(frame: FrameType) -> Site:
    """The :class:`Site` (with column) of the expression ``frame`` is executing.

    Cached by (code object identity, instruction offset): a ``DataLoader(...)`` re-made every
    epoch finds its line once, not once per epoch. (Identity, not equality: equal code objects
    of two copies of a script in different folders have different filenames.)
    """
    code = frame.f_code
    key = (id(code), frame.f_lasti)
    entry = _SITES.get(key)
    if entry is not None and entry[0] is code:
        return entry[1]
    row, column = _column(frame)
    site = Site(code.co_filename, row, column)
    if len(_SITES) < 4096:
        _SITES[key] = (code, site)  # holding the code keeps its id from being reused
    return site


def first_user_frame(frame: FrameType | None) -> FrameType | None:
    """``frame`` or the nearest caller whose code is user code (see :func:`is_library_file`)."""
    while frame is not None:
        if not is_library_file(frame.f_code.co_filename):
            return frame
        frame = frame.f_back
    return None


def first_user_site(frame: FrameType | None) -> Site | None:
    """The :class:`Site` of ``frame`` or of the nearest caller outside library code."""
    user = first_user_frame(frame)
    return frame_site(user) if user is not None else None


def user_site(skip: int = 1) -> Site | None:
    """The :class:`Site` (``(filename, row)`` with ``.column``) of the innermost user frame at or
    above ``skip`` frames up (1: the caller), e.g. where the user constructed an object; None when
    only library code is on the stack. It walks the stack: call it once per construction."""
    try:
        frame = sys._getframe(skip)
    except ValueError:  # pragma: no cover - a stack shallower than ``skip``
        return None
    return first_user_site(frame)


def handed_over_site(obj: object, skip: int = 1, hops: int = 3) -> Site | None:
    """Like :func:`user_site`, but where the user function that holds ``obj`` received it as an
    argument from a user caller (``def save_checkpoint(state, path): torch.save(state, path)``),
    the caller's line: where the saved object was put together, the line the checker reports.
    Follows at most ``hops`` such hand-overs; a library frame in between stops the walk."""
    try:
        frame = first_user_frame(sys._getframe(skip))
    except ValueError:  # pragma: no cover - a stack shallower than ``skip``
        return None
    for _ in range(hops):
        caller = frame.f_back if frame is not None else None
        if frame is None or caller is None or is_library_file(caller.f_code.co_filename):
            break
        if not _received(frame, obj):
            break
        frame = caller
    return frame_site(frame) if frame is not None else None


def _received(frame: FrameType, obj: object) -> bool:
    """Whether one of the function's parameters (as bound now) is ``obj`` itself."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    if count == 0:
        return False
    local = frame.f_locals
    return any(local.get(name) is obj for name in code.co_varnames[:count])


_MODULE_CALL = {"_call_impl", "_wrapped_call_impl"}


def _torch_module_file() -> str | None:
    mod = sys.modules.get("torch.nn.modules.module")
    return getattr(mod, "__file__", None)


def forward_call_site(skip: int = 1) -> Site | None:
    """(filename, row) of the user line that called the outermost ``nn.Module``.

    Walks outwards from the current frame; every ``Module.__call__`` frame moves the mark, so the
    result is the caller of the root module (``model(x)``), not a line inside its ``forward``.
    Falls back to :func:`user_site` when no module call is on the stack.
    """
    frame: FrameType | None = sys._getframe(skip)
    module_file = _torch_module_file()
    outer: FrameType | None = None
    while frame is not None:
        code = frame.f_code
        if code.co_name in _MODULE_CALL and code.co_filename == module_file:
            outer = frame
        frame = frame.f_back
    if outer is None:
        return user_site(skip + 1)
    return first_user_site(outer.f_back)


def site_kwargs(site: Site | None) -> dict[str, Any]:
    """``filename``/``row`` keyword arguments for :meth:`Monitor.report`."""
    if not site:
        return {}
    out: dict[str, Any] = {"filename": site[0], "row": site[1]}
    column = getattr(site, "column", None)
    if column:
        out["column"] = column
    return out


def session_state(session: object, key: str, factory: Callable[[], T]) -> T:
    """The per-session object stored under ``key``, created by ``factory()`` on first use."""
    store = getattr(session, "_td_live_state", None)
    if store is None:
        store = {}
        try:
            setattr(session, "_td_live_state", store)  # noqa: B010 - an attribute no session type declares
        except Exception:  # pragma: no cover - a session that refuses attributes
            return factory()
    if key not in store:
        store[key] = factory()
    return cast(T, store[key])  # the factory of ``key`` made it (one factory per key)


def save_cache(session: object) -> dict[str, Any]:
    """The per-session dictionary that lives for one ``torch.save``: what the monitors of that save
    share about the saved object (its audit). The checkpoint probe empties it after the save's
    ``on_checkpoint_save``, so an entry never outlives its save (nor keeps the object alive)."""
    return session_state(session, "save_cache", dict)


def clear_save_cache(session: object) -> None:
    """Empty :func:`save_cache` (the checkpoint probe, after each save's event)."""
    save_cache(session).clear()


def fields_repr(obj: Any, names: Iterable[str]) -> str:
    """``ClassName(a=1, b='x')`` for the attributes ``names`` of ``obj`` (a dataclass-like repr)."""
    return f"{type(obj).__name__}({', '.join(f'{name}={getattr(obj, name)!r}' for name in names)})"


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
