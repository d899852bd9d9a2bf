"""``traindoctor check PATH...``: discover files, check them (cached, on all cores), fix, report.

Behaves like ``ruff check`` where users will notice: the same flags and precedence (a
command-line ``--select`` starts a new selection, discarding the configured ``ignore`` and
``extend-select``; ``--select``/``--ignore``/``--extend-select`` may be repeated), ``-`` reads
stdin (``--stdin-filename`` names it), ``--force-exclude`` applies ``exclude`` to named files,
and the exit codes: 0 no findings, 1 findings, 2 usage or internal error (a missing path, an
unwritable report or fix among them).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from traindoctor.check import adopt
from traindoctor.check.cache import Cache, cache_directory
from traindoctor.check.checkfile import FileOutcome, check_file
from traindoctor.check.discovery import force_excluded, iter_python_files
from traindoctor.check.engine import instantiate
from traindoctor.check.runner import CheckOptions, check_many
from traindoctor.check.writer import write_atomically
from traindoctor.config import ConfigError, Settings, load_settings, parse_version
from traindoctor.errors import UsageError
from traindoctor.finding import Finding, sort_findings
from traindoctor.registry import UnknownCodeError, select_codes
from traindoctor.report import get_reporter, sarif
from traindoctor.report import text as text_report
from traindoctor.static.source import parse_error

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
PROG = "traindoctor check"
STDIN = "-"


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Statically check training scripts and notebooks (never imports torch)."
    )
    parser.add_argument(
        "paths",
        nargs="*",
        default=["."],
        metavar="PATH",
        help="files or folders to check (`-` reads the source from stdin)",
    )
    rules = parser.add_argument_group("rule selection (repeatable; comma-separated)")
    rules.add_argument(
        "--select",
        type=_csv,
        action="extend",
        help="codes or prefixes to enable (TD1 = all TD1xx); replaces the configured selection",
    )
    rules.add_argument("--ignore", type=_csv, action="extend", help="codes or prefixes to disable")
    rules.add_argument("--extend-select", type=_csv, action="extend", help="codes or prefixes to add to the selection")
    parser.add_argument("--output-format", choices=["text", "json", "sarif", "github"], default="text")
    parser.add_argument("-o", "--output-file", help="write the report here instead of stdout")
    parser.add_argument("--fix", action="store_true", help="apply safe fixes")
    parser.add_argument("--unsafe-fixes", action="store_true", help="also apply unsafe fixes")
    parser.add_argument("--diff", action="store_true", help="print the fixes as a diff; change nothing")
    parser.add_argument(
        "--show-source",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="show the offending line under each finding (default: on)",
    )
    parser.add_argument("--statistics", action="store_true", help="count findings per code")
    parser.add_argument("--min-torch-version", help="oldest torch the code must support (e.g. 2.4)")
    parser.add_argument("--config", help="path to a pyproject.toml to read [tool.traindoctor] from")
    parser.add_argument("--no-respect-gitignore", action="store_true")
    parser.add_argument(
        "--force-exclude",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="apply `exclude` to files named on the command line too (for pre-commit hooks)",
    )
    parser.add_argument(
        "--stdin-filename", metavar="NAME", help="the name of the file read from stdin (for config, ignores, notebooks)"
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=0,
        metavar="N",
        help="worker processes (default: the cores other programs leave idle; 1: no workers)",
    )
    parser.add_argument(
        "--no-cache", action="store_true", help="neither read nor write the cache (also: TRAINDOCTOR_NO_CACHE=1)"
    )
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="where to keep the cache (default: .traindoctor_cache in the project root; also: TRAINDOCTOR_CACHE_DIR)",
    )
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even with findings")
    parser.add_argument("-q", "--quiet", action="store_true", help="print findings only")
    adopt.add_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return run_check(args)


def _selection(settings: Settings, args: argparse.Namespace) -> Settings:
    """Layer the command line's rule selection over the configuration's, as ruff does.

    A command-line ``--select`` starts afresh (the configured ``select``, ``ignore`` and
    ``extend-select`` no longer apply); otherwise the command line's ``--extend-select`` and
    ``--ignore`` adjust the configured selection, the more specific of the two winning.
    """
    if args.select:
        return settings.with_overrides(
            select=args.select, ignore=list(args.ignore or []), extend_select=list(args.extend_select or [])
        )
    if not args.ignore and not args.extend_select:
        return settings
    base = set(settings.enabled_codes())
    ignored = select_codes(select=args.ignore) if args.ignore else set()
    added = select_codes(select=args.extend_select, ignore=args.ignore) if args.extend_select else set()
    final = (base - ignored) | added
    if not final:  # everything ignored: ALL selected and ALL ignored leaves nothing on
        return settings.with_overrides(select=["ALL"], ignore=["ALL"], extend_select=[])
    return settings.with_overrides(select=sorted(final), ignore=[], extend_select=[])


def _settings_from_args(args: argparse.Namespace) -> Settings:
    paths = list(args.paths)
    if STDIN in paths and args.stdin_filename:
        # The configuration is the one the named file would get (it need not exist).
        named = Path(args.stdin_filename).absolute()
        existing = next((p for p in [named, *named.parents] if p.exists()), Path.cwd())
        paths = [str(existing) if p == STDIN else p for p in paths]
    settings = load_settings(paths, args.config)
    settings = _selection(settings, args)
    settings = settings.with_overrides(
        min_torch_version=args.min_torch_version,
        respect_gitignore=False if args.no_respect_gitignore else None,
        force_exclude=args.force_exclude,
    )
    if args.min_torch_version:
        parse_version(args.min_torch_version)
    return settings


def _check_output_file(path: str | None) -> None:
    if not path:
        return
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"cannot write the report to {path}: folder {folder} does not exist")
    if target.is_dir():
        raise UsageError(f"cannot write the report to {path}: it is a folder")


def _cache_for(args: argparse.Namespace, settings: Settings) -> Cache | None:
    """The run's cache; None when it is off (``--no-cache``, ``TRAINDOCTOR_NO_CACHE``, ``--fix``,
    ``--diff``). Raises :class:`CacheFolderError` (a usage error) for a folder it may not use."""
    if args.no_cache or args.fix or args.diff:
        return None
    directory = cache_directory(settings, args.cache_dir)
    return Cache.open(directory, settings) if directory is not None else None


def run_check(args: argparse.Namespace) -> int:
    try:
        if args.jobs < 0:
            raise UsageError(f"--jobs must be >= 0, got {args.jobs}")
        if STDIN in args.paths and len(args.paths) > 1:
            raise UsageError("`-` (read stdin) cannot be combined with other paths")
        _check_output_file(args.output_file)
        adopt.check_arguments(args)
        settings = _settings_from_args(args)
        codes = settings.enabled_codes()
        cache = None if args.paths == [STDIN] else _cache_for(args, settings)
    except (ConfigError, UnknownCodeError, UsageError) as exc:
        print(f"traindoctor: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.paths == [STDIN]:
        return _run_stdin(args, settings)
    return _run_files(args, settings, codes, cache)


def _run_files(args: argparse.Namespace, settings: Settings, codes: frozenset[str], cache: Cache | None) -> int:
    errors = False
    findings: list[Finding] = []
    items: list[tuple[str, bytes]] = []
    folders: list[str] = []

    def unreadable(path: Path, exc: OSError, what: str = "file") -> None:
        """A path that cannot be read: a TD000 finding for it (a warning when TD000 is off)."""
        why = f"Cannot read the {what} ({exc.strerror or exc}); it was skipped."
        if "TD000" in codes:
            findings.append(parse_error(str(path), why))
        else:
            print(f"traindoctor: warning: {path}: {why}", file=sys.stderr)

    def unreadable_folder(path: Path, exc: OSError) -> None:
        folders.append(str(path))
        unreadable(path, exc, "folder")

    excludes = list(settings.exclude) + list(settings.extend_exclude)
    for path in iter_python_files(
        args.paths,
        excludes,
        settings.respect_gitignore,
        force_exclude=settings.force_exclude,
        root=settings.project_root,
        onerror=unreadable_folder,
    ):
        try:
            items.append((str(path), path.read_bytes()))
        except (FileNotFoundError, NotADirectoryError):
            print(f"traindoctor: error: {path}: no such file or directory", file=sys.stderr)
            errors = True
        except OSError as exc:  # permissions, a symlink loop, ...
            unreadable(path, exc)
    options = CheckOptions(fix=args.fix or args.diff, unsafe_fixes=args.unsafe_fixes, diff=args.diff, jobs=args.jobs)
    outcomes = check_many(items, settings, options, cache)
    if cache is not None:
        cache.save()

    internal: list[str] = []
    diffs: list[str] = []
    fixed_count = 0
    data_of = dict(items)
    for outcome in outcomes:
        internal.extend(outcome.internal_errors)
        if outcome.new_data is not None:
            if args.diff:
                diffs.append(outcome.diff)
                fixed_count += outcome.fixes_applied
            else:
                try:
                    write_atomically(outcome.filename, outcome.new_data)
                    fixed_count += outcome.fixes_applied
                except OSError as exc:
                    errors = True
                    print(
                        f"traindoctor: error: cannot write the fixes to {outcome.filename} "
                        f"({exc.strerror or exc}); the file was left unchanged",
                        file=sys.stderr,
                    )
                    outcome = _unfixed(outcome.filename, data_of[outcome.filename], settings)
        findings.extend(outcome.findings)
    findings = sort_findings(findings)
    findings, finished = adopt.apply(args, findings, settings, checked=[name for name, _ in items])
    if finished is not None:
        for message in internal:
            print(f"traindoctor: internal error: {message}", file=sys.stderr)
        return EXIT_ERROR if internal or errors else finished

    try:
        out, handle = _open_output(args.output_file)
    except OSError as exc:
        print(
            f"traindoctor: error: cannot write the report to {args.output_file}: {exc.strerror or exc}", file=sys.stderr
        )
        return EXIT_ERROR
    try:
        if args.diff:
            out.write("".join(diffs))
            if fixed_count:
                print(f"Would fix {fixed_count} finding{'s' if fixed_count != 1 else ''}.", file=sys.stderr)
        else:
            _report(
                out,
                args,
                findings,
                len(items) + _unreadable_count(findings, items, folders),
                fixed_count,
                passed_allowed=not errors,
            )
    finally:
        if handle is not None:
            handle.close()

    for message in internal:
        print(f"traindoctor: internal error: {message}", file=sys.stderr)
    if internal or errors:
        return EXIT_ERROR
    if args.diff:
        return EXIT_FINDINGS if diffs else EXIT_OK
    if findings and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_OK


def _unreadable_count(findings: list[Finding], items: list[tuple[str, bytes]], folders: list[str]) -> int:
    """How many files could not be read (each has its TD000 finding; folders do not count)."""
    skip = {name for name, _ in items} | set(folders)
    return len({f.filename for f in findings if f.filename not in skip})


def _unfixed(filename: str, data: bytes, settings: Settings) -> FileOutcome:
    """The findings of a file whose fixes could not be written: those of the file as it is."""
    return check_file(filename, data, settings, instantiate(settings.enabled_codes()))


def _open_output(path: str | None) -> tuple[TextIO, TextIO | None]:
    if not path:
        return sys.stdout, None
    handle = open(path, "w", encoding="utf-8")
    return handle, handle


def _report(
    out: TextIO,
    args: argparse.Namespace,
    findings: list[Finding],
    files: int,
    fixed_count: int,
    passed_allowed: bool = True,
) -> None:
    if args.statistics:
        if args.output_format == "json":
            out.write(statistics_json(findings))
        else:
            out.write(text_report.statistics(findings))
    elif args.output_format == "text":
        out.write(text_report.render(findings, show_source=args.show_source))
        if not args.quiet:
            if findings:
                out.write("\n")
            if args.fix and fixed_count:
                out.write(f"Fixed {fixed_count} finding{'s' if fixed_count != 1 else ''}.\n")
            if findings or passed_allowed:
                out.write(text_report.summary(findings, files) + "\n")
    elif args.output_format == "sarif" and args.baseline:
        out.write(sarif.render(findings, baseline_state="new"))
    else:
        out.write(get_reporter(args.output_format)(findings))


def statistics_json(findings: list[Finding]) -> str:
    """``--statistics --output-format json``: ruff's fields (code, name, count, fixable)."""
    rows: dict[str, list[Finding]] = {}
    for f in findings:
        rows.setdefault(f.code, []).append(f)
    data = [
        {
            "code": code,
            "name": rows[code][0].name,
            "count": len(rows[code]),
            "fixable": any(f.fix is not None and f.fix.is_safe for f in rows[code]),
        }
        for code in sorted(rows, key=lambda c: (-len(rows[c]), c))
    ]
    return json.dumps(data, indent=2) + "\n"


def _run_stdin(args: argparse.Namespace, settings: Settings) -> int:
    """Check the source on stdin; with ``--fix``, print the fixed source and report on stderr."""
    data = sys.stdin.buffer.read()
    filename = args.stdin_filename or STDIN
    excludes = list(settings.exclude) + list(settings.extend_exclude)
    if (
        args.stdin_filename
        and settings.force_exclude
        and force_excluded(Path(filename), excludes, settings.project_root)
    ):
        if args.fix:
            sys.stdout.buffer.write(data)
        return EXIT_OK
    rules = instantiate(settings.enabled_codes())
    outcome = check_file(
        filename, data, settings, rules, fix=args.fix or args.diff, unsafe_fixes=args.unsafe_fixes, diff=args.diff
    )
    for message in outcome.internal_errors:
        print(f"traindoctor: internal error: {message}", file=sys.stderr)
    findings = sort_findings(outcome.findings)
    if args.diff:
        sys.stdout.write(outcome.diff)
        if outcome.internal_errors:
            return EXIT_ERROR
        return EXIT_FINDINGS if outcome.diff else EXIT_OK
    if args.fix:
        sys.stdout.flush()
        sys.stdout.buffer.write(outcome.new_data if outcome.new_data is not None else data)
        sys.stdout.buffer.flush()
        report_to: TextIO = sys.stderr
    else:
        report_to = sys.stdout
    try:
        out, handle = (report_to, None) if not args.output_file else _open_output(args.output_file)
    except OSError as exc:
        print(
            f"traindoctor: error: cannot write the report to {args.output_file}: {exc.strerror or exc}", file=sys.stderr
        )
        return EXIT_ERROR
    try:
        _report(out, args, findings, 1, outcome.fixes_applied)
    finally:
        if handle is not None:
            handle.close()
    if outcome.internal_errors:
        return EXIT_ERROR
    return EXIT_FINDINGS if findings and not args.exit_zero else EXIT_OK
