"""Dicts the file spells out (static/dicts.py): a name bound in several branches is read at the
binding of its own block; names read in expression-bodied nodes (a lambda, a conditional
expression) have no block and are not spelled out rather than an error."""

from __future__ import annotations

import ast
import textwrap

from traindoctor.check.engine import file_context
from traindoctor.config import Settings
from traindoctor.static.context import FileContext


def context(source: str) -> FileContext:
    source = textwrap.dedent(source).lstrip("\n")
    return file_context("train.py", source, ast.parse(source), Settings(min_torch_version="2.13"))


def _reads(ctx: FileContext, name: str) -> list[ast.Name]:
    return [n for n in ctx.of(ast.Name) if n.id == name and isinstance(n.ctx, ast.Load)]


def test_branch_bound_dict_read_in_its_own_block() -> None:
    ctx = context("""
        def build(multi):
            if multi:
                kw = {"num_workers": 0}
                a = dict(**kw)
            else:
                kw = {"num_workers": 8, "pin_memory": True}
                b = dict(**kw)
    """)
    first, second = _reads(ctx, "kw")
    assert set(ctx.dict_literal(first) or {}) == {"num_workers"}
    assert set(ctx.dict_literal(second) or {}) == {"num_workers", "pin_memory"}


def test_branch_bound_name_read_in_a_lambda_or_conditional_expression_is_not_spelled_out() -> None:
    # torch/utils/checkpoint.py once made TD301 and TD307 fail here: a lambda's body is an
    # expression, not a block of statements
    ctx = context("""
        def build(multi, make):
            if multi:
                kw = {"num_workers": 0}
            else:
                kw = {"num_workers": 8}
            f = lambda: make(**kw)
            g = make(**kw) if multi else None
            return f, g
    """)
    reads = _reads(ctx, "kw")
    assert len(reads) == 2
    assert [ctx.dict_literal(r) for r in reads] == [None, None]
