"""``traindoctor server``: start the editor server on stdin/stdout (see docs/editors.md).

The LSP library is imported only here, once the command runs: without the ``lsp`` extra the
command says how to install it (one line, exit 2) instead of failing with a traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import sys
from collections.abc import Sequence

EXIT_ERROR = 2
INSTALL_HINT = "traindoctor server: needs the lsp extra (pygls, lsprotocol): pip install 'traindoctor[lsp]'"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="traindoctor server",
        description="Run the Language Server Protocol server over stdio (editors start it; see docs/editors.md).",
    )
    parser.add_argument(
        "--debounce-ms",
        type=int,
        default=250,
        metavar="MS",
        help="check a changed document once it has not changed for MS milliseconds (default: 250)",
    )
    parser.add_argument("--log-file", metavar="FILE", help="write the server's own log to FILE")
    return parser


def lsp_available() -> bool:
    """Whether pygls and lsprotocol can be imported (looked up without importing them)."""
    try:
        return all(importlib.util.find_spec(name) is not None for name in ("pygls", "lsprotocol"))
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules
        return False


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.debounce_ms < 0:
        print("traindoctor server: --debounce-ms must be >= 0", file=sys.stderr)
        return EXIT_ERROR
    if not lsp_available():
        print(INSTALL_HINT, file=sys.stderr)
        return EXIT_ERROR
    if args.log_file:
        logging.basicConfig(filename=args.log_file, level=logging.INFO)
    from traindoctor.server.app import serve

    serve(args.debounce_ms / 1000)
    return 0
