"""The flags for adopting ``traindoctor check`` on existing code: baselines and ``--add-noqa``.

- ``--write-baseline FILE`` records the run's findings in FILE and reports nothing (exit 0);
- ``--baseline FILE`` reports only the findings FILE does not hold (SARIF marks them
  ``baselineState: new``); with ``--write-baseline`` too, the baseline is *ratcheted*: the entries
  that still occur are written back, so fixed findings drop out and new ones never get in;
- ``--add-noqa`` writes ``# noqa: TDnnn`` on the line of each finding reported (ruff's flag) and
  reports nothing else; exit 0 when every finding got its comment, 1 when some could not.

The command line's ``check`` calls :func:`add_arguments`, :func:`check_arguments` and, once the
findings are known, :func:`apply`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from traindoctor.check.baseline import Baseline, BaselineError, SourceLines, entry_for, write
from traindoctor.check.noqa import add_noqa
from traindoctor.check.writer import write_atomically
from traindoctor.config import ConfigError, Settings
from traindoctor.finding import Finding

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("adopting on existing code")
    group.add_argument("--baseline", metavar="FILE", help="report only findings that FILE does not hold")
    group.add_argument(
        "--write-baseline",
        metavar="FILE",
        help="record today's findings in FILE (with --baseline: keep only the entries that still occur)",
    )
    group.add_argument("--add-noqa", action="store_true", help="add `# noqa: TDnnn` to each reported line")


def check_arguments(args: argparse.Namespace) -> None:
    """Raise ConfigError (a usage error) for combinations the adoption flags do not support."""
    flags = [name for name, on in _flags(args) if on]
    if not flags:
        return
    if args.paths == ["-"]:
        raise ConfigError(f"{flags[0]} needs files to read, not stdin")
    if args.add_noqa and (args.fix or args.diff):
        raise ConfigError("--add-noqa cannot be combined with --fix or --diff")
    if args.add_noqa and args.write_baseline:
        raise ConfigError("--add-noqa and --write-baseline are two ways to accept findings: choose one")


def _flags(args: argparse.Namespace) -> list[tuple[str, bool]]:
    return [
        ("--baseline", bool(args.baseline)),
        ("--write-baseline", bool(args.write_baseline)),
        ("--add-noqa", bool(args.add_noqa)),
    ]


def _read(filename: str) -> bytes:
    return Path(filename).read_bytes()


def apply(
    args: argparse.Namespace, findings: list[Finding], settings: Settings, checked: Sequence[str]
) -> tuple[list[Finding], int | None]:
    """The findings to report and, when the run ends here, its exit code (else None).

    ``checked`` names every file the run read: baseline entries of other files are kept.
    """
    if not any(on for _, on in _flags(args)):
        return findings, None
    lines = SourceLines(_read)  # rows count in the files as they are now (after any --fix)
    root = settings.project_root
    try:
        if args.baseline:
            comparison = Baseline.load(args.baseline).compare(findings, root, lines, checked)
            findings = comparison.new
            if args.write_baseline:
                write(args.write_baseline, comparison.matched + comparison.elsewhere)
            if not args.quiet:
                _say_baseline(args.baseline, len(comparison.matched), len(comparison.gone), bool(args.write_baseline))
        elif args.write_baseline:
            write(args.write_baseline, [entry_for(f, root, lines) for f in findings])
            print(
                f"Wrote {len(findings)} finding{'s' if len(findings) != 1 else ''} to the baseline {args.write_baseline}.",
                file=sys.stderr,
            )
            return findings, EXIT_OK
    except BaselineError as exc:
        print(f"traindoctor: error: {exc}", file=sys.stderr)
        return findings, EXIT_ERROR
    if args.add_noqa:
        return findings, _add_noqa(findings)
    return findings, None


def _say_baseline(path: str, matched: int, gone: int, ratcheted: bool) -> None:
    if matched:
        print(f"{matched} finding{'s' if matched != 1 else ''} in the baseline {path} not shown.", file=sys.stderr)
    if gone and ratcheted:
        print(f"{gone} fixed finding{'s' if gone != 1 else ''} dropped from the baseline.", file=sys.stderr)
    elif gone:
        print(
            f"{gone} baseline entr{'ies' if gone != 1 else 'y'} no longer occur; "
            "add --write-baseline with the same file to drop them.",
            file=sys.stderr,
        )


def _add_noqa(findings: list[Finding]) -> int:
    outcome = add_noqa(findings, _read)
    status = EXIT_OK
    added = 0
    for filename, data in outcome.new_data.items():
        try:
            write_atomically(filename, data)
            added += outcome.added[filename]
        except OSError as exc:
            print(
                f"traindoctor: error: cannot write {filename} ({exc.strerror or exc}); left unchanged", file=sys.stderr
            )
            status = EXIT_ERROR
    for finding, why in outcome.skipped:
        cell = f"cell {finding.cell}:" if finding.cell is not None else ""
        where = f"{finding.filename}:{cell}{finding.location.row}" if finding.location else finding.filename
        print(f"traindoctor: no noqa added for {finding.code} at {where}: {why}", file=sys.stderr)
    print(f"Added {added} noqa directive{'s' if added != 1 else ''}.", file=sys.stderr)
    if status == EXIT_OK and outcome.skipped:
        status = EXIT_FINDINGS
    return status
