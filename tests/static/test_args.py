"""argparse values read back (static/args.py): once the script reassigns an option, its default is no
longer its value (the declared default stays readable).
"""

from __future__ import annotations

import ast
import textwrap

from helpers.scripts import PARSER

from traindoctor.check.engine import file_context
from traindoctor.config import Settings
from traindoctor.static.args import UNKNOWN
from traindoctor.static.context import FileContext


def context(source: str) -> FileContext:
    source = textwrap.dedent(source).lstrip("\n")
    return file_context("train.py", source, ast.parse(source), Settings(min_torch_version="2.13"))


def _workers_attr(ctx: FileContext) -> ast.Attribute:
    return next(n for n in ctx.of(ast.Attribute) if n.attr == "workers" and isinstance(n.ctx, ast.Load))


def test_argparse_default_is_unknown_once_the_option_is_reassigned() -> None:
    plain = context(PARSER.replace("{reassign}", "pass"))
    assert plain.argparse_default(_workers_attr(plain)) == 32
    for reassign in (
        "args.workers = int((args.workers + ngpus_per_node - 1) / ngpus_per_node)",
        "args.workers //= ngpus_per_node",
        "args.workers: int = 4",
        'setattr(args, "workers", 4)',
    ):
        ctx = context(PARSER.replace("{reassign}", reassign))
        node = next(n for n in ctx.of(ast.Attribute) if n.attr == "workers" and n.lineno == 11)
        assert ctx.argparse_default(node) is UNKNOWN, reassign
        assert ctx.value(node) is UNKNOWN, reassign
        assert ctx.argparse_default(node, declared=True) == 32, reassign
        lr = next(n for n in ctx.of(ast.Attribute) if n.attr == "lr" and isinstance(n.ctx, ast.Load))
        assert ctx.value(lr) == 0.1, reassign  # other options keep their defaults


def test_an_attribute_of_self_does_not_hide_the_option() -> None:
    ctx = context(
        PARSER.replace("{reassign}", "pass") + "\nclass Cfg:\n    def __init__(self):\n        self.workers = 2\n"
    )
    assert ctx.argparse_default(_workers_attr(ctx)) == 32
