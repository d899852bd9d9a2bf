"""``traindoctor run``: run a training script (or module) as ``__main__`` under the doctor.

Like ``coverage run``, the script runs in this process: ``sys.argv`` is ``[SCRIPT, *ARGS]``,
``sys.path[0]`` is the script's folder (the current folder for ``-m``), and the script's exit code
is the command's exit code. ``sys.exit`` (with a non-zero status: the report is marked partial),
an uncaught exception (its traceback printed as Python prints it; partial), Ctrl-C (partial, exit
code 130) and SIGTERM (partial, exit code 143) all still produce the report. Under ``torchrun`` every rank watches itself and
rank 0 writes the merged report.

``--output-format json`` without ``-o`` keeps stdout for the JSON report alone: while the script
runs, its standard output (file descriptor 1, so child processes and C extensions too) goes to
standard error, and the report is written to stdout at the end, so
``traindoctor run --output-format json train.py > report.json`` is always parseable.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from traindoctor.errors import UsageError
from traindoctor.runtime.live import fields_repr
from traindoctor.runtime.script import ScriptOutcome, ScriptRunner

USAGE = """\
usage: traindoctor run [--output-format text|json] [-o FILE] [--select CODES] [--ignore CODES]
                       [--threshold KEY=VALUE ...] [--html FILE] [--tensorboard DIR]
                       (-m MODULE | SCRIPT) [ARGS ...]

Run a training script under the runtime doctor and report findings with measured evidence,
plus a short pipeline profile.

options:
  --output-format {text,json}  report format (default: text); json without -o: stdout holds only
                               the report, the script's own stdout goes to stderr
  -o, --output-file FILE       write the report to FILE instead of stdout
  --select CODES               comma-separated codes or prefixes to enable (TD1 = all TD1xx)
  --ignore CODES               comma-separated codes or prefixes to disable
  --threshold KEY=VALUE        override a rule threshold, e.g. TD102.min_wait_share=0.3 (repeatable)
  --reference-batch N          effective batch your LR was tuned for (TD203/TD206)
  --reference-lr LR            the LR tuned for --reference-batch (TD203/TD206)
  --no-decay PATTERNS          comma-separated no-decay name patterns the script uses (TD205)
  --config FILE                pyproject.toml to read [tool.traindoctor] from
  --html FILE                  also write a self-contained HTML report (needs traindoctor[html])
  --tensorboard DIR            also write the per-step profile as TensorBoard scalars
  -m MODULE                    run a library module as a script (like python -m)
  -h, --help                   show this help
"""

EXIT_USAGE = 2
EXIT_TERMINATED = 128 + 15


class Terminated(BaseException):
    """Raised in the script's main thread when SIGTERM arrives (like KeyboardInterrupt for
    SIGINT): ``finally`` blocks run, the doctor writes its partial report, the exit code is 143."""


#: Options that are shorthands for ``--threshold KEY=VALUE`` (read by the TD2xx monitors).
_THRESHOLD_ALIASES = {
    "--reference-batch": "reference_batch",
    "--reference-lr": "reference_lr",
    "--no-decay": "no_decay",
}


class RunOptions:
    """The parsed ``traindoctor run`` command line (see :func:`parse_args`)."""

    __slots__ = (
        "args",
        "config",
        "help",
        "html",
        "ignore",
        "module",
        "output_file",
        "output_format",
        "script",
        "select",
        "tensorboard",
        "thresholds",
    )

    output_format: str
    output_file: str | None
    select: list[str] | None
    ignore: list[str]
    thresholds: dict[str, Any]
    config: str | None
    module: str | None
    script: str | None
    args: list[str]
    help: bool
    html: str | None
    tensorboard: str | None

    def __init__(self) -> None:
        """The defaults: text to stdout, every default rule, no script yet."""
        self.output_format = "text"
        self.output_file = self.select = self.config = self.module = self.script = None
        self.ignore = []
        self.thresholds = {}
        self.args = []
        self.help = False
        self.html = self.tensorboard = None

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_value(text: str) -> Any:
    """``"0.3"`` -> 0.3, ``"4"`` -> 4, ``"true"`` -> True; anything else stays a string."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_args(argv: Sequence[str]) -> RunOptions:
    """Options up to the script (or ``-m MODULE``); everything after belongs to the script."""
    opts = RunOptions()
    args = list(argv)
    i = 0

    def value(flag: str) -> str:
        nonlocal i
        if "=" in args[i] and args[i].startswith("--"):
            return args[i].split("=", 1)[1]
        if i + 1 >= len(args):
            raise UsageError(f"{flag} needs a value")
        i += 1
        return args[i]

    while i < len(args):
        arg = args[i]
        name = arg.split("=", 1)[0] if arg.startswith("--") else arg
        if name in ("-h", "--help"):
            opts.help = True
            return opts
        if name == "--output-format":
            fmt = value(name)
            if fmt not in ("text", "json"):
                raise UsageError(f"--output-format must be text or json, not {fmt!r}")
            opts.output_format = fmt
        elif name in ("-o", "--output-file"):
            opts.output_file = value(name)
        elif name == "--select":
            opts.select = (opts.select or []) + _csv(value(name))
        elif name == "--ignore":
            opts.ignore += _csv(value(name))
        elif name == "--threshold":
            pair = value(name)
            if "=" not in pair:
                raise UsageError(f"--threshold expects KEY=VALUE, got {pair!r}")
            key, raw = pair.split("=", 1)
            opts.thresholds[key.strip()] = parse_value(raw)
        elif name in _THRESHOLD_ALIASES:
            opts.thresholds[_THRESHOLD_ALIASES[name]] = parse_value(value(name))
        elif name == "--config":
            opts.config = value(name)
        elif name == "--html":
            opts.html = value(name)
        elif name == "--tensorboard":
            opts.tensorboard = value(name)
        elif name == "-m" or (arg.startswith("-m") and len(arg) > 2 and not arg.startswith("--")):
            opts.module = arg[2:] if len(arg) > 2 else value(name)
            opts.args = args[i + 1 :]
            return opts
        elif arg == "--":
            if i + 1 >= len(args):
                raise UsageError("missing SCRIPT after --")
            opts.script = args[i + 1]
            opts.args = args[i + 2 :]
            return opts
        elif arg.startswith("-") and arg != "-":
            raise UsageError(f"unknown option {arg!r}")
        else:
            opts.script = arg
            opts.args = args[i + 1 :]
            return opts
        i += 1
    raise UsageError("missing SCRIPT or -m MODULE")


def _settings(opts: RunOptions) -> tuple[list[str] | None, list[str], dict[str, Any]]:
    """select/ignore/thresholds from [tool.traindoctor], overridden by the command line."""
    from traindoctor.config import load_settings
    from traindoctor.registry import select_codes

    start = [opts.script] if opts.script else None
    settings = load_settings(start, opts.config)
    select = opts.select if opts.select is not None else settings.select
    ignore = list(settings.ignore) + list(opts.ignore)
    thresholds = dict(settings.thresholds)
    thresholds.update(opts.thresholds)
    select_codes(select, ignore)  # raises UnknownCodeError for a bad selector
    return select, ignore, thresholds


def _runner(opts: RunOptions) -> ScriptRunner:
    """The script or module of ``opts`` with its arguments; SIGTERM stops it with exit code 143."""
    return ScriptRunner(opts.script, opts.args, module=opts.module, stops={Terminated: EXIT_TERMINATED})


def _check_target(opts: RunOptions) -> str | None:
    if opts.module:
        import importlib.util

        # Only the top-level name: finding ``pkg.train`` would import (run) ``pkg`` before the
        # watch starts. Like ``python -m``, the current folder comes first on the path.
        top = opts.module.split(".", 1)[0]
        sys.path.insert(0, os.getcwd())
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError) as exc:
            return f"No module named {opts.module} ({exc})"
        finally:
            sys.path.pop(0)
        if spec is None:
            return f"No module named {top}"
        return None
    script = opts.script or ""
    if not os.path.exists(script):
        return f"can't open file {os.path.abspath(script)!r}: [Errno 2] No such file or directory"
    if os.path.isdir(script) and not os.path.isfile(os.path.join(script, "__main__.py")):
        return (
            f"{script!r} is a directory without a __main__.py; pass the training script "
            f"(e.g. {os.path.join(script, 'train.py')})"
        )
    return None


def _write(text: str, path: str | None) -> None:
    if path:
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``traindoctor run``; returns the script's exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        sys.stderr.write(f"traindoctor run: {exc}\n\n{USAGE}")
        return EXIT_USAGE
    if opts.help:
        sys.stdout.write(USAGE)
        return 0
    problem = _check_target(opts) or _check_extras(opts)
    if problem:
        sys.stderr.write(f"traindoctor run: {problem}\n")
        return EXIT_USAGE
    try:
        select, ignore, thresholds = _settings(opts)
    except ValueError as exc:  # ConfigError, UnknownCodeError
        sys.stderr.write(f"traindoctor run: {exc}\n")
        return EXIT_USAGE

    from traindoctor.doctor.watch import doctor_session

    session = doctor_session(select=select, ignore=ignore, thresholds=thresholds)
    json_stdout = opts.output_format == "json" and not opts.output_file
    stdout_fd = _stdout_to_stderr() if json_stdout else None
    real_stdout = sys.stdout
    if json_stdout:
        sys.stdout = sys.stderr  # also for a stdout that is not file descriptor 1
    old_term = _catch_sigterm()
    session.start()
    guard = _start_rank_guard(session, opts)
    outcome = ScriptOutcome(0)
    try:
        outcome = _runner(opts).run(around=guard.run_script if guard is not None else None)
        error = outcome.error
        if isinstance(error, Terminated):
            session.mark_partial("the run was terminated (SIGTERM)")
        elif error is None and outcome.code != 0:
            session.mark_partial(f"the script exited with status {outcome.code}")
        elif guard is not None and error is not None and not isinstance(error, KeyboardInterrupt):
            guard.note_exception(error)  # the script's own error
    finally:
        sys.stdout.flush()
        session.stop(type(outcome.error) if outcome.error is not None else None)
        _restore_sigterm(old_term)
        if json_stdout:
            sys.stdout = real_stdout
        if stdout_fd is not None:
            _restore_stdout(stdout_fd)
    return _report(session, opts, outcome.code, guard)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def _catch_sigterm() -> Any:
    """Turn SIGTERM into :class:`Terminated` while the script runs (only where SIGTERM still has
    its default action and we are the main thread; a script may install its own handler)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            return None
        return signal.signal(signal.SIGTERM, _on_sigterm)
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no SIGTERM here
        return None


def _restore_sigterm(previous: Any) -> None:
    if previous is None:
        return
    try:
        if signal.getsignal(signal.SIGTERM) is _on_sigterm:
            signal.signal(signal.SIGTERM, previous)
    except (ValueError, OSError):  # pragma: no cover
        pass


def _stdout_to_stderr() -> int | None:
    """Send file descriptor 1 to stderr; returns a copy of the real stdout to restore."""
    try:
        sys.stdout.flush()
        saved = os.dup(1)
        os.dup2(2, 1)
        return saved
    except (OSError, ValueError, AttributeError):  # no real file descriptors (embedded, tests)
        return None


def _restore_stdout(saved: int) -> None:
    try:
        sys.stdout.flush()
    except Exception:  # pragma: no cover - the script closed stdout
        pass
    try:
        os.dup2(saved, 1)
        os.close(saved)
    except OSError:  # pragma: no cover
        pass


def _start_rank_guard(session: Any, opts: RunOptions) -> Any:
    """Under torchrun: the guard that gets this rank's evidence to rank 0 however it ends."""
    try:
        from traindoctor.doctor import distributed

        if not distributed.is_distributed():
            return None
        return distributed.RankGuard(
            session, lambda merged: _write_report(merged, opts), base_report=lambda: _base_report(session, opts, 0)
        ).start()
    except Exception as exc:  # fail-open
        session.notes.append(f"rank guard not started: {type(exc).__name__}: {exc}")
        return None


def _needs_timeline(session: Any, opts: RunOptions) -> bool:
    """Whether any output reads the per-step timeline: the JSON report, the HTML report, and a
    multi-rank run (rank 0's timeline travels in the merged report)."""
    return opts.output_format == "json" or bool(opts.html) or session.world_size > 1


def _base_report(session: Any, opts: RunOptions, code: int) -> dict[str, Any]:
    report: dict[str, Any] = session.report_dict(timeline=_needs_timeline(session, opts))
    report["environment"]["command"] = (["-m", opts.module] if opts.module else [opts.script]) + list(opts.args)
    report["environment"]["exit_code"] = code
    return report


def _write_report(report: dict[str, Any], opts: RunOptions) -> None:
    from traindoctor.report.run import render_json, render_text

    text = render_json(report) if opts.output_format == "json" else render_text(report)
    _write(text, opts.output_file)


def _report(session: Any, opts: RunOptions, code: int, guard: Any = None) -> int:
    """Write the report (rank 0 only under torchrun, merged over the ranks); fail-open."""
    try:
        from traindoctor.doctor import distributed

        report = _base_report(session, opts, code)
        if guard is not None:
            try:
                merged = guard.finish(report, code)
                if merged is not None:
                    _write_report(merged, opts)
            finally:
                guard.close()
            return code
        elif distributed.is_distributed():
            merged = distributed.gather(
                report,
                rank=session.rank,
                world_size=session.world_size,
                local_world_size=session.local_world_size,
                timeout_s=float(session.thresholds.get("distributed.wait_s", distributed.DEFAULT_WAIT_S)),
            )
            if merged is None:
                return code
            report = merged
        _write_report(report, opts)
    except Exception as exc:  # the report must never change the script's exit code
        sys.stderr.write(f"traindoctor run: could not write the report: {type(exc).__name__}: {exc}\n")
        return code
    _write_extras(session, report, opts)
    return code


def _check_extras(opts: RunOptions) -> str | None:
    """Before the run: ``--html`` needs plotly, ``--tensorboard`` needs tensorboard."""
    if opts.html:
        from traindoctor.report.html import missing_dependency

        return missing_dependency()
    if opts.tensorboard:
        from traindoctor.report.tensorboard import missing_dependency as missing_tb

        return missing_tb()
    return None


def _write_extras(session: Any, report: dict[str, Any], opts: RunOptions) -> None:
    """``--html`` and ``--tensorboard`` outputs; each fails alone, with a message."""
    if opts.html:
        try:
            from traindoctor.report.html import render_run_html, write_html

            write_html(render_run_html(report), opts.html)
        except Exception as exc:
            sys.stderr.write(f"traindoctor run: could not write {opts.html}: {type(exc).__name__}: {exc}\n")
    if opts.tensorboard:
        try:
            from traindoctor.report.tensorboard import write_events
            from traindoctor.runtime.timeline import session_timeline

            write_events(session_timeline(session, max_points=None), opts.tensorboard, report.get("profile"))
        except Exception as exc:
            sys.stderr.write(
                f"traindoctor run: could not write TensorBoard events to "
                f"{opts.tensorboard}: {type(exc).__name__}: {exc}\n"
            )
