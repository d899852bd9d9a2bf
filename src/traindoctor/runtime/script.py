"""Run a user's script (or module) as ``__main__`` in this process, as ``python`` would.

The one runner of ``traindoctor run``, the ``verify-resume`` children and the ``tune`` trials.
coverage.py's ``PyRunner`` is the model: prepare ``sys.path`` and ``sys.argv``, build
``__main__`` (``runpy``), run it, map how it ended to the exit code ``python`` would give, and
print an uncaught exception's traceback without traindoctor's own frames. ``sys.argv`` and
``sys.path`` are restored afterwards.

How it ends -> :class:`ScriptOutcome`:

* the script returns: code 0;
* ``sys.exit(code)``: Python's rule (None 0, an int modulo 256, anything else printed to stderr
  and 1);
* Ctrl-C (``KeyboardInterrupt``): its traceback, code 130 (``EXIT_INTERRUPTED``);
* an exception the caller raises on purpose to stop the script (``stops``: its type -> exit code):
  no traceback, that code;
* any other exception: its traceback, code 1.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence

#: The exit code of a script stopped by Ctrl-C (128 + SIGINT, as a shell reports it).
EXIT_INTERRUPTED = 130

#: traindoctor's own folder: its frames at the top of a traceback are the runner's, not the user's.
_OURS = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
#: The probes' thin wrappers (``DataLoader.__next__``, ``torch.save``, ...), hidden anywhere in a traceback.
_PROBES = os.path.join(_OURS, "runtime", "probes") + os.sep


class ScriptOutcome:
    """How the script ended: its exit ``code``, and the ``error`` that ended it (None when it
    returned or called ``sys.exit``)."""

    __slots__ = ("code", "error")

    code: int
    error: BaseException | None

    def __init__(self, code: int, error: BaseException | None = None) -> None:
        self.code = code
        self.error = error

    def __repr__(self) -> str:
        return f"ScriptOutcome(code={self.code!r}, error={self.error!r})"


class ScriptRunner:
    """Runs ``script`` (a path) or ``module`` (``-m``) with ``args`` as ``__main__``.

    ``sys.argv`` becomes ``[script, *args]`` (``[module, *args]``, which ``runpy`` completes), and
    the script's folder (the current folder for a module) comes first on ``sys.path``. ``stops``
    maps the exception types the caller raises to stop the script (a signal, a finished trial) to
    their exit codes.
    """

    def __init__(
        self,
        script: str | None,
        args: Sequence[str] = (),
        *,
        module: str | None = None,
        stops: Mapping[type[BaseException], int] | None = None,
    ) -> None:
        self.script = script
        self.module = module
        self.args = list(args)
        self.stops = dict(stops or {})

    def run(self, around: Callable[[Callable[[], None]], object] | None = None) -> ScriptOutcome:
        """Run the script (through ``around(run)`` when given: a caller that must know while the
        user's code runs) and say how it ended; tracebacks go to stderr."""
        saved_argv, saved_path = list(sys.argv), list(sys.path)
        try:
            if around is not None:
                around(self._main)
            else:
                self._main()
        except SystemExit as exc:
            return ScriptOutcome(exit_code(exc))
        except KeyboardInterrupt as exc:
            print_user_traceback(exc)
            return ScriptOutcome(EXIT_INTERRUPTED, exc)
        except BaseException as exc:  # the script's own error, or a stop the caller raised
            stop = next((code for kind, code in self.stops.items() if isinstance(exc, kind)), None)
            if stop is not None:
                return ScriptOutcome(stop, exc)
            print_user_traceback(exc)
            return ScriptOutcome(1, exc)
        finally:
            sys.argv[:] = saved_argv
            sys.path[:] = saved_path
        return ScriptOutcome(0)

    def _main(self) -> None:
        """Prepare ``sys.argv``/``sys.path`` and execute the script as ``__main__``."""
        if self.module:
            sys.argv = [self.module, *self.args]  # runpy replaces argv[0] with the module's file
            sys.path[0:0] = [os.getcwd()]
            runpy.run_module(self.module, run_name="__main__", alter_sys=True)
        else:
            script = self.script or ""
            sys.argv = [script, *self.args]
            sys.path[0:0] = [os.path.dirname(os.path.abspath(script))]
            runpy.run_path(script, run_name="__main__")


def exit_code(exc: SystemExit) -> int:
    """The process exit code Python would use for ``sys.exit(code)`` (a message is printed)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, bool):
        return int(code)
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    print(code, file=sys.stderr)
    return 1


def print_user_traceback(exc: BaseException) -> None:
    """Print the traceback as ``python x.py`` would: without the doctor's own frames.

    Dropped: the runner's frames at the top (traindoctor's, ``runpy``'s) and, anywhere in the
    stack, the probes' thin wrappers (``DataLoader.__next__``, ``torch.save``, ...) that sit
    between the user's call and torch. A frame where the exception was raised is always kept, so a
    bug in the doctor itself still shows where it happened.
    """
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        filename = tb.tb_frame.f_code.co_filename
        if (
            filename.startswith(_OURS)
            or filename in ("<frozen runpy>", "<frozen importlib._bootstrap>")
            or os.path.basename(filename) == "runpy.py"
        ):
            tb = tb.tb_next
            continue
        break
    try:
        report = traceback.TracebackException(type(exc), exc, tb)
        _hide_probe_frames(report)
        sys.stderr.write("".join(report.format()))
    except Exception:  # pragma: no cover - never lose the user's traceback over cosmetics
        traceback.print_exception(type(exc), exc, tb)
    sys.stderr.flush()


def _hide_probe_frames(report: traceback.TracebackException) -> None:
    """Remove probe wrapper frames from ``report`` and the exceptions chained to it."""
    seen: set[int] = set()
    pending = [report]
    while pending:
        te = pending.pop()
        if id(te) in seen:
            continue
        seen.add(id(te))
        frames = list(te.stack)
        kept = [f for i, f in enumerate(frames) if i == len(frames) - 1 or not f.filename.startswith(_PROBES)]
        if len(kept) != len(frames):
            te.stack = traceback.StackSummary.from_list(kept)
        for linked in (te.__cause__, te.__context__):
            if linked is not None:
                pending.append(linked)
        pending.extend(getattr(te, "exceptions", None) or [])  # exception groups
