"""The ``traindoctor`` command line.

``rule`` and ``rules`` live here; the other subcommands are owned by their feature packages and
receive the rest of the command line: ``check`` -> ``traindoctor.check.cli``, ``run`` ->
``traindoctor.doctor.cli``, ``ckpt`` -> ``traindoctor.checkpoint.cli``, ``verify-resume`` ->
``traindoctor.resume.cli``, ``tune`` -> ``traindoctor.tune.cli``, ``server`` ->
``traindoctor.server.cli``.
Exit codes follow ruff: 0 no findings, 1 findings, 2 usage or internal error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from traindoctor.version import __version__

#: subcommand -> module whose ``main(argv) -> int`` handles it.
DELEGATED = {
    "check": "traindoctor.check.cli",
    "run": "traindoctor.doctor.cli",
    "ckpt": "traindoctor.checkpoint.cli",
    "verify-resume": "traindoctor.resume.cli",
    "tune": "traindoctor.tune.cli",
    "server": "traindoctor.server.cli",
}

#: one-line help shown by ``traindoctor --help`` for delegated subcommands.
HELP = {
    "check": "statically check training scripts (never imports torch)",
    "server": "run the editor (Language Server Protocol) server over stdio",
}

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="traindoctor",
        description="Find, explain, measure and fix silent PyTorch training configuration mistakes.",
    )
    parser.add_argument("--version", action="version", version=f"traindoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    for name in DELEGATED:
        sub.add_parser(name, help=HELP.get(name, f"see `traindoctor {name} --help`"), add_help=False)
    rule = sub.add_parser("rule", help="print a rule's documentation")
    rule.add_argument("code", help="TD102 or loader-in-main-process")

    rules = sub.add_parser("rules", help="list all rules")
    rules.add_argument("--output-format", choices=["text", "json"], default="text")

    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; never lets a traceback of traindoctor's own reach the user."""
    try:
        return _main(argv)
    except BrokenPipeError:  # `traindoctor rules | head`
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return EXIT_OK
    except KeyboardInterrupt:
        print("traindoctor: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # pragma: no cover - a bug of ours: say so plainly
        print(
            f"traindoctor: internal error: {type(exc).__name__}: {exc}\n"
            "Please report this with the command line that caused it.",
            file=sys.stderr,
        )
        return EXIT_ERROR


def _main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in DELEGATED:
        try:
            module = importlib.import_module(DELEGATED[argv[0]])
        except ImportError as exc:
            print(f"traindoctor {argv[0]}: not available ({exc})", file=sys.stderr)
            return EXIT_ERROR
        return int(module.main(argv[1:]) or 0)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_ERROR
    if args.command == "rule":
        from traindoctor.docs import render_rule
        from traindoctor.registry import get_rule

        found = get_rule(args.code)
        if found is None:
            print(f"traindoctor: unknown rule {args.code!r} (see `traindoctor rules`)", file=sys.stderr)
            return EXIT_ERROR
        sys.stdout.write(render_rule(found))
        return EXIT_OK
    if args.command == "rules":
        from traindoctor.registry import all_rules

        if args.output_format == "json":
            import json

            data = [
                {
                    "code": r.code,
                    "name": r.name,
                    "severity": r.severity.value,
                    "summary": r.summary,
                    "origins": r.origins(),
                    "gpu_only": r.gpu_only,
                    "fix": r.fixable,
                }
                for r in all_rules()
            ]
            print(json.dumps(data, indent=2))
        else:
            for r in all_rules():
                origin = "/".join(o[0].upper() for o in r.origins())
                gpu = " GPU" if r.gpu_only else ""
                print(f"{r.code}  {r.name:<36} {r.severity.value:<8} {origin:<4}{gpu:<4} {r.summary}")
        return EXIT_OK
    parser.error(f"unknown command {args.command}")  # pragma: no cover
    return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
