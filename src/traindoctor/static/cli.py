"""``traindoctor check PATH...``: discover files, run the static engine, fix, report, exit like ruff.

Exit codes follow ruff: 0 no findings, 1 findings, 2 usage or internal error.
"""

from __future__ import annotations

import argparse
import codecs
import difflib
import io
import sys
import tokenize
from pathlib import Path
from typing import Sequence

from traindoctor.config import ConfigError, Settings, load_settings
from traindoctor.finding import Finding, Location, Origin, Severity, sort_findings
from traindoctor.registry import UnknownCodeError
from traindoctor.report import get_reporter
from traindoctor.report import text as text_report
from traindoctor.static.discovery import iter_python_files
from traindoctor.static.engine import FileResult, check_source, instantiate

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
PROG = "traindoctor check"


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description="Statically check training scripts (never imports torch)."
    )
    parser.add_argument("paths", nargs="*", default=["."], metavar="PATH")
    parser.add_argument("--select", type=_csv, help="codes or prefixes to enable (TD1 = all TD1xx)")
    parser.add_argument("--ignore", type=_csv, help="codes or prefixes to disable")
    parser.add_argument("--extend-select", type=_csv, help="codes or prefixes to add to the selection")
    parser.add_argument(
        "--output-format", choices=["text", "json", "sarif", "github"], default="text"
    )
    parser.add_argument("-o", "--output-file", help="write the report here instead of stdout")
    parser.add_argument("--fix", action="store_true", help="apply safe fixes")
    parser.add_argument("--unsafe-fixes", action="store_true", help="also apply unsafe fixes")
    parser.add_argument("--diff", action="store_true", help="print the fixes as a diff; change nothing")
    parser.add_argument(
        "--show-source", action=argparse.BooleanOptionalAction, default=True,
        help="show the offending line under each finding (default: on)",
    )
    parser.add_argument("--statistics", action="store_true", help="count findings per code")
    parser.add_argument("--min-torch-version", help="oldest torch the code must support (e.g. 2.4)")
    parser.add_argument("--config", help="path to a pyproject.toml to read [tool.traindoctor] from")
    parser.add_argument("--no-respect-gitignore", action="store_true")
    parser.add_argument("--exit-zero", action="store_true", help="exit 0 even with findings")
    parser.add_argument("-q", "--quiet", action="store_true", help="print findings only")

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    return run_check(args)


def _settings_from_args(args: argparse.Namespace) -> Settings:
    settings = load_settings(args.paths, args.config)
    settings = settings.with_overrides(
        select=args.select,
        ignore=(settings.ignore + args.ignore) if args.ignore else None,
        extend_select=(settings.extend_select + args.extend_select) if args.extend_select else None,
        min_torch_version=args.min_torch_version,
        respect_gitignore=False if args.no_respect_gitignore else None,
    )
    if args.min_torch_version:
        from traindoctor.config import parse_version

        parse_version(args.min_torch_version)
    return settings


def _encode_like(original: bytes, text: str) -> bytes:
    """Encode fixed text with the file's own encoding (and BOM) so nothing else changes."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(original).readline)
    except SyntaxError:
        encoding = "utf-8"
    if encoding == "utf-8-sig" or original.startswith(codecs.BOM_UTF8):
        return codecs.BOM_UTF8 + text.encode("utf-8")
    return text.encode(encoding)


def _unreadable(path: Path, exc: OSError) -> Finding:
    return Finding(
        code="TD000",
        name="parse-error",
        severity=Severity.ERROR,
        message=f"Cannot read the file ({exc.strerror or exc}); it was skipped.",
        filename=str(path),
        location=Location(1, 1),
        origin=Origin.STATIC,
    )


def run_check(args: argparse.Namespace) -> int:
    try:
        settings = _settings_from_args(args)
        codes = settings.enabled_codes()
    except (ConfigError, UnknownCodeError) as exc:
        print(f"traindoctor: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    rules = instantiate(codes)
    exit_code = EXIT_OK
    findings: list[Finding] = []
    internal: list[str] = []
    diffs: list[str] = []
    fixed_count = 0
    files = 0
    want_fix = args.fix or args.diff
    excludes = list(settings.exclude) + list(settings.extend_exclude)
    for path in iter_python_files(args.paths, excludes, settings.respect_gitignore):
        if not path.exists():
            print(f"traindoctor: error: {path}: no such file or directory", file=sys.stderr)
            exit_code = EXIT_ERROR
            continue
        files += 1
        try:
            data = path.read_bytes()
        except OSError as exc:
            if "TD000" in codes:
                findings.append(_unreadable(path, exc))
            continue
        result: FileResult = check_source(
            data, str(path), settings, rules, fix=want_fix, unsafe_fixes=args.unsafe_fixes
        )
        internal.extend(result.internal_errors)
        if result.fixed_source is not None and result.original_source is not None:
            fixed_count += result.fixes_applied
            if args.diff:
                diffs.append(
                    "".join(
                        difflib.unified_diff(
                            result.original_source.splitlines(keepends=True),
                            result.fixed_source.splitlines(keepends=True),
                            fromfile=str(path),
                            tofile=str(path),
                        )
                    )
                )
            else:
                path.write_bytes(_encode_like(data, result.fixed_source))
        findings.extend(result.findings)
    findings = sort_findings(findings)

    out = sys.stdout
    handle = None
    if args.output_file:
        handle = open(args.output_file, "w", encoding="utf-8")
        out = handle
    try:
        if args.diff:
            out.write("".join(diffs))
            if fixed_count:
                print(f"Would fix {fixed_count} finding{'s' if fixed_count != 1 else ''}.", file=sys.stderr)
        elif args.statistics:
            out.write(text_report.statistics(findings))
        elif args.output_format == "text":
            out.write(text_report.render(findings, show_source=args.show_source))
            if not args.quiet:
                if findings:
                    out.write("\n")
                if args.fix and fixed_count:
                    out.write(f"Fixed {fixed_count} finding{'s' if fixed_count != 1 else ''}.\n")
                out.write(text_report.summary(findings, files) + "\n")
        else:
            out.write(get_reporter(args.output_format)(findings))
    finally:
        if handle is not None:
            handle.close()

    for message in internal:
        print(f"traindoctor: internal error: {message}", file=sys.stderr)
    if internal or exit_code == EXIT_ERROR:
        return EXIT_ERROR
    if args.diff:
        return EXIT_FINDINGS if diffs else EXIT_OK
    if findings and not args.exit_zero:
        return EXIT_FINDINGS
    return EXIT_OK
