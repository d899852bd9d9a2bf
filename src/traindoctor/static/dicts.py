"""Dicts a file spells out, read as keyword arguments (``DataLoader(ds, **loader_kwargs)``).

Rules ask ``ctx.dict_literal(node)`` through :class:`~traindoctor.static.context.FileContext`; the
answers live here, one :class:`SpelledDicts` per file, built on first use.
"""

from __future__ import annotations

import ast
from functools import cached_property

from traindoctor.static.names import receiver
from traindoctor.static.protocols import FileIndex

#: Methods that change a dict in place.
MUTATING_METHODS = ("update", "setdefault", "pop", "popitem", "clear")


class SpelledDicts:
    """Which dicts of one file are spelled out, and what they hold."""

    def __init__(self, ctx: FileIndex) -> None:
        self.ctx = ctx

    @cached_property
    def mutated_names(self) -> frozenset[str]:
        """Names of containers changed in place somewhere in the file.

        ``kw = {...}; kw.update(cuda_kwargs)`` or ``kw["num_workers"] = 4``: the literal no longer
        says what the container holds, so :meth:`dict_literal` treats such a name as opaque.
        Matching by name alone (not scope) errs on the side of silence.
        """
        out: set[str] = set()
        for attr in MUTATING_METHODS:
            for call in self.ctx.method_calls(attr):
                target = receiver(call)
                if isinstance(target, ast.Name):
                    out.add(target.id)
        for sub in self.ctx.of(ast.Subscript):
            if isinstance(sub.ctx, (ast.Store, ast.Del)) and isinstance(sub.value, ast.Name):
                out.add(sub.value.id)
        for aug in self.ctx.of(ast.AugAssign):
            if isinstance(aug.target, ast.Name) and isinstance(aug.op, ast.BitOr):
                out.add(aug.target.id)
        return frozenset(out)

    def dict_literal(self, node: ast.AST) -> dict[str, ast.expr] | None:
        """Keys -> value nodes of a dict the file spells out (``{...}``, ``dict(k=v)``), else None.

        A name whose dict is changed in place (``.update``, item assignment) is not spelled out.
        """
        for _ in range(4):
            if isinstance(node, ast.Name):
                if node.id in self.mutated_names:
                    return self._updated_dict(node)
                bound = self.ctx.binding(node)
                if bound is None:
                    bound = block_binding(self.ctx, node)
                if bound is None:
                    return None
                node = bound
                continue
            break
        if isinstance(node, ast.Dict):
            out: dict[str, ast.expr] = {}
            for k, v in zip(node.keys, node.values):
                if k is None:
                    inner = self.dict_literal(v)
                    if inner is None:
                        return None
                    out.update(inner)
                elif isinstance(k, ast.Constant) and isinstance(k.value, str):
                    out[k.value] = v
                else:
                    return None
            return out
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            if node.args:
                return None
            out = {}
            for kw in node.keywords:
                if kw.arg is None:
                    inner = self.dict_literal(kw.value)
                    if inner is None:
                        return None
                    out.update(inner)
                else:
                    out[kw.arg] = kw.value
            return out
        return None

    def dict_alternatives(self, node: ast.AST) -> list[dict[str, ast.expr]] | None:
        """The spelled-out dicts a conditional expression picks between, each branch followed
        (``extra = dict(fused=True) if use_fused else dict()``), else None: a ``**extra`` passes
        a key only when some alternative holds it."""
        if isinstance(node, ast.Name) and node.id not in self.mutated_names:
            bound = self.ctx.binding(node)
            node = bound if bound is not None else node
        if not isinstance(node, ast.IfExp):
            return None
        out: list[dict[str, ast.expr]] = []
        for branch in (node.body, node.orelse):
            found = self.dict_literal(branch)
            if found is not None:
                out.append(found)
                continue
            nested = self.dict_alternatives(branch) if isinstance(branch, ast.IfExp) else None
            if nested is None:
                return None
            out.extend(nested)
        return out

    def _apart(self, change: ast.AST, use: ast.AST) -> bool:
        """Whether a change of a dict cannot reach a use of it: the two sit in different arms of
        one ``if``, or the change comes after the use and no loop around the use runs it again."""
        arms: dict[int, ast.AST] = {}
        child, parent = change, self.ctx.parent(change)
        while parent is not None:
            arms[id(parent)] = child
            child, parent = parent, self.ctx.parent(parent)
        child, parent = use, self.ctx.parent(use)
        looped = False
        while parent is not None:
            if id(parent) in arms:
                other = arms[id(parent)]
                if isinstance(parent, ast.If):
                    sides = [(c in parent.body, c in parent.orelse) for c in (other, child)]
                    if all(any(s) for s in sides) and sides[0] != sides[1]:
                        return True
                break
            looped = looped or isinstance(parent, (ast.For, ast.AsyncFor, ast.While))
            child, parent = parent, self.ctx.parent(parent)
        return _pos(change) > _pos(use) and not looped

    def _dominates(self, stmt: ast.stmt, use: ast.AST) -> bool:
        """Whether ``stmt`` runs on every path to ``use``: it comes first, in a block of
        statements that holds the use (directly or in a statement nested in it)."""
        if (stmt.lineno, stmt.col_offset) > (getattr(use, "lineno", 0), getattr(use, "col_offset", 0)):
            return False
        block = self.ctx.parent(stmt)
        child, parent = use, self.ctx.parent(use)
        while parent is not None:
            if parent is block:
                return any(
                    isinstance(body, list) and stmt in body and child in body
                    for body in (getattr(parent, f, None) for f in ("body", "orelse", "finalbody"))
                )
            child, parent = parent, self.ctx.parent(parent)
        return False

    def _updated_dict(self, name: ast.Name) -> dict[str, ast.expr] | None:
        """A dict the file spells out and then only extends with spelled-out entries:
        ``kw = {"batch_size": b}; if use_cuda: kw.update({"num_workers": 1, "pin_memory": True})``.

        The result holds every entry any path adds (the GPU path of the pytorch/examples idiom);
        an entry removed or defaulted by a constant key (``kw.pop("eps", None)``) is held by a name
        bound nowhere, whose value is unknown; any other in-place change (``popitem``, ``|=``, an
        opaque update) makes the dict unknown (None)."""
        if self.__dict__.get("_updating") == name.id:
            return None
        bound = self.ctx.binding(name)
        if bound is None:
            return None
        self.__dict__["_updating"] = name.id
        try:
            base = self.dict_literal(bound) if not isinstance(bound, ast.Name) else None
            if base is None:
                return None
            merged = dict(base)
            scope = self.ctx.scope_of(bound)
            for attr in MUTATING_METHODS:
                for call in self.ctx.method_calls(attr):
                    target = receiver(call)
                    if not (isinstance(target, ast.Name) and target.id == name.id):
                        continue
                    if self._apart(call, name):
                        continue  # another branch than the use, or after it: not on its path
                    if attr in ("pop", "setdefault") and self.ctx.scope_of(call) is scope:
                        key = call.args[0] if call.args else None
                        if isinstance(key, ast.Constant) and isinstance(key.value, str):
                            # that entry may be gone or set (which, the paths decide); the others stay
                            merged[key.value] = _uncertain(call)
                            continue
                        return None
                    if attr != "update" or len(call.args) > 1 or self.ctx.scope_of(call) is not scope:
                        return None
                    added: dict[str, ast.expr] = {}
                    if call.args:
                        extra = self.dict_literal(call.args[0])
                        if extra is None:
                            return None
                        added.update(extra)
                    for kw in call.keywords:
                        if kw.arg is None:
                            return None
                        added[kw.arg] = kw.value
                    statement = self.ctx.parent(call)
                    certain = isinstance(statement, ast.Expr) and self._dominates(statement, name)
                    for entry, value in added.items():
                        # a literal entry overridden on some paths only: either value may hold
                        merged[entry] = value if certain or entry not in base else _uncertain(call)
            for sub in self.ctx.of(ast.Subscript):
                if (
                    isinstance(sub.value, ast.Name)
                    and sub.value.id == name.id
                    and not isinstance(sub.ctx, ast.Load)
                    and not self._apart(sub, name)
                ):
                    key = sub.slice
                    parent = self.ctx.parent(sub)
                    if (
                        isinstance(sub.ctx, ast.Store)
                        and isinstance(key, ast.Constant)
                        and isinstance(key.value, str)
                        and isinstance(parent, ast.Assign)
                        and len(parent.targets) == 1
                        and self.ctx.scope_of(sub) is scope
                    ):
                        if key.value in base and not self._dominates(parent, name):
                            merged[key.value] = _uncertain(parent)  # the literal's or this one: the path decides
                        else:
                            merged[key.value] = parent.value
                    else:
                        return None
            for aug in self.ctx.of(ast.AugAssign):
                if isinstance(aug.target, ast.Name) and aug.target.id == name.id:
                    return None
            return merged
        finally:
            self.__dict__.pop("_updating", None)


_BLOCKS = ("body", "orelse", "finalbody")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.Module)


def block_binding(ctx: FileIndex, name: ast.Name) -> ast.expr | None:
    """The value of the ``name = value`` statement that last runs before ``name`` is read, when
    the name is bound several times: the nearest preceding assignment of the block holding the
    read (or of a block around it), with no statement in between that may rebind it
    (``if multi: kw = {"num_workers": 0} ... DataLoader(ds, **kw)`` in each branch). None when
    it cannot be told (a loop around the read rebinds it, a binding in a nested statement)."""
    node: ast.AST = name
    parent = ctx.parent(node)
    while parent is not None:
        block = next((b for f in _BLOCKS if isinstance(b := getattr(parent, f, None), list) and node in b), None)
        if block is not None:
            for stmt in reversed(block[: block.index(node)]):
                if (
                    isinstance(stmt, ast.Assign)
                    and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)
                    and stmt.targets[0].id == name.id
                ):
                    return stmt.value
                if _binds(stmt, name.id):
                    return None
            if isinstance(parent, (ast.For, ast.AsyncFor, ast.While)) and _binds(parent, name.id):
                return None  # an earlier pass of the loop may have rebound it
        if isinstance(parent, _SCOPES):
            return None
        node, parent = parent, ctx.parent(parent)
    return None


def _binds(stmt: ast.AST, name: str) -> bool:
    return any(
        isinstance(n, ast.Name) and n.id == name and not isinstance(n.ctx, ast.Load) for n in ast.walk(stmt)
    ) or any(isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names for n in ast.walk(stmt))


def _pos(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _uncertain(call: ast.AST) -> ast.expr:
    """A stand-in for an entry whose presence and value depend on the path (``kw.pop("eps")``):
    a name bound nowhere, so that evaluating it gives UNKNOWN; placed at the call that changes it."""
    node = ast.Name(id="__traindoctor_uncertain__", ctx=ast.Load())
    return ast.copy_location(node, call)
