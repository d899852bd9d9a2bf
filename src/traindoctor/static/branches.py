"""Which branches a run takes with the file's defaults: ``if args.scale_lr:`` behind a
``store_true`` flag is an opt-in, off unless the user asks for it. Code there does not describe
the default run (an LR scaled, a model frozen only when asked), and rules that would stay silent
because of it must not.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def not_taken_by_default(ctx: FileContext, node: ast.AST) -> bool:
    """Whether ``node`` sits in a branch of an ``if`` (or a conditional expression) whose test the
    file's defaults decide the other way (``if args.use_lora:`` with ``action="store_true"``,
    ``if False:``), within its own function."""
    child: ast.AST = node
    for anc in ctx.ancestors(node):
        if isinstance(anc, _SCOPES):
            return False
        if isinstance(anc, (ast.If, ast.IfExp)) and child is not anc.test:
            value = ctx.value(anc.test)
            if isinstance(value, (bool, int)) and not isinstance(value, str):
                taken = anc.body if isinstance(anc, ast.If) else [anc.body]
                if any(child is b for b in taken) != bool(value):
                    return True
        child = anc
    return False
