"""argparse values read back (static/args.py): once the script reassigns an option, its default is no
longer its value (the declared default stays readable).
"""

from __future__ import annotations

import ast
import textwrap

from helpers.scripts import PARSER

from traindoctor.check.engine import file_context
from traindoctor.config import Settings
from traindoctor.static.args import MISSING, UNKNOWN, find_arg
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


def test_kwargs_entries_changed_on_other_paths_or_of_a_conditional_dict() -> None:
    ctx = context("""
        def build(args, cuda):
            kw = dict(lr=args.lr, eps=1e-8, momentum=0.9)
            if args.opt == "sgd":
                kw.pop("eps", None)
                a = SGD(params, **kw)
            elif args.opt == "adafactor":
                kw["lr"] = None
                b = Adafactor(params, **kw)
            c = AdamW(params, **kw)
            extra = dict(fused=True) if cuda else dict()
            d = AdamW(params, lr=0.1, **extra)
            e = AdamW(params, **(dict(weight_decay=0.0) if cuda else dict()))
            kw["momentum"] = 0.5
        """)
    calls = {}
    for call in ctx.of(ast.Call):
        if isinstance(call.func, ast.Name):
            calls.setdefault(call.func.id, []).append(call)
    (sgd,), (ada,), adamw = calls["SGD"], calls["Adafactor"], calls["AdamW"]
    # the adafactor branch's store does not reach the SGD branch; the pop makes eps unknown there
    assert ctx.segment(find_arg(sgd, "lr", None, ctx)) == "args.lr"
    assert ctx.value(find_arg(sgd, "eps", None, ctx)) is UNKNOWN
    assert ctx.value(find_arg(ada, "lr", None, ctx)) is None
    # after both branches either value may hold; the later store is not on the path yet
    assert ctx.value(find_arg(adamw[0], "lr", None, ctx)) is UNKNOWN
    assert ctx.value(find_arg(adamw[0], "momentum", None, ctx)) == 0.9
    # ``**extra`` of a conditional: a key no alternative holds is not passed, one that one holds is unknown
    assert find_arg(adamw[1], "weight_decay", None, ctx) is MISSING
    assert find_arg(adamw[1], "fused", None, ctx) is UNKNOWN
    assert find_arg(adamw[2], "weight_decay", None, ctx) is UNKNOWN
