"""Typed readings of the nodes a file's context hands out, shared by the facts packages.

The context's indexes promise more than their types say: every call that
:meth:`~traindoctor.static.context.FileContext.method_calls` returns calls an attribute
(``opt.step()``). The helpers here state such a promise once, where the facts read it.
"""

from __future__ import annotations

import ast
from typing import cast


def receiver(call: ast.Call) -> ast.expr:
    """What a method call is made on: ``opt`` of ``opt.step()``.

    For a call :meth:`~traindoctor.static.context.FileContext.method_calls` returned, whose
    callee is an attribute by construction."""
    return cast(ast.Attribute, call.func).value
