"""Which file a save writes and a load reads: path expressions compared by what they name (TD507).

:meth:`CheckpointPaths.path_keys` gives keys that identify the file a path expression names
(its constant value, the expression, a plain name's binding, a checkpoint-like base name); two
paths that share a key are the same file. A path built from a loop variable names a new file
each epoch or step and overwrites nothing.
"""

from __future__ import annotations

import ast
import os
import re

from traindoctor.facts.checkpoint.static.base import IndexPart, TrainingObjects, arg_of
from traindoctor.facts.checkpoint.static.saves import Saves, SaveSite, after_training_loop
from traindoctor.static.names import dotted
from traindoctor.static.vocab import META

#: A checkpoint-like file name (``last.pt``, ``model_best.pth``): the same base name is the same file.
_RX_CKPT_FILE = re.compile(r"^[\w\-.]*[A-Za-z0-9_\-]\.(pt|pth|ckpt|tar|bin|pkl)$")

#: What identifies the file a path names: ``("const", value)``, ``("expr", dump)``, ``("base",
#: name)``, or ``("name", id(scope), name)`` for a name bound more than once.
PathKey = tuple[str, str] | tuple[str, int, str]


class CheckpointPaths(IndexPart):
    """The files a file's saves write and its loads read."""

    def __init__(self, objects: TrainingObjects, saves: Saves) -> None:
        super().__init__(objects)
        self.saves = saves

    def path_keys(self, expr: ast.expr | None, at: ast.AST) -> set[PathKey]:
        """Keys identifying the file a path expression names; shared keys mean the same file."""
        if expr is None:
            return set()
        ctx = self.ctx
        keys: set[PathKey] = set()
        node = expr
        for _ in range(3):
            if isinstance(node, ast.Name):
                bound = ctx.bindings_of(node)
                if bound and len(bound) == 1 and bound[0] is not None:
                    node = bound[0]
                    continue
                if bound:
                    keys.add(("name", id(ctx.scope_of(node)), node.id))
                return keys | self._basename_keys(expr, at)
            break
        value = ctx.value(node)
        if isinstance(value, str):
            keys.add(("const", value))
        elif not isinstance(node, ast.Name):
            keys.add(("expr", ast.dump(node, annotate_fields=False, include_attributes=False)))
        return keys | self._basename_keys(node, at)

    def _basename_keys(self, expr: ast.AST, at: ast.AST) -> set[PathKey]:
        """The checkpoint-like base names in ``expr``; none when it varies with a loop around ``at``."""
        ctx = self.ctx
        loop_vars = set()
        for loop in ctx.enclosing_loops(at):
            for n in ast.walk(loop.target) if isinstance(loop, (ast.For, ast.AsyncFor)) else ():
                if isinstance(n, ast.Name):
                    loop_vars.add(n.id)
        out: set[PathKey] = set()
        for n in ast.walk(expr):
            if isinstance(n, ast.Name) and n.id in loop_vars:
                return set()  # a new file per epoch/step does not overwrite the one resume reads
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                base = os.path.basename(n.value)
                if _RX_CKPT_FILE.match(base) and "{" not in base:
                    out.add(("base", base))
        return out

    def read_back(self, site: SaveSite) -> bool:
        """A resume path reads this save back: a ``torch.load`` of the same file that is not a
        read of the finished result after the training loop."""
        if not self.saves.loads:
            return False
        ctx = self.ctx
        saved_keys = self.path_keys(site.path, site.call)
        if not saved_keys:
            return False
        for call in self.saves.loads:
            if after_training_loop(ctx, call, site):
                continue
            if saved_keys & self.path_keys(arg_of(ctx, call, "f", 0), call):
                return True
        return False

    def overwritten_resume_files(self) -> list[SaveSite]:
        """Saves in the training loop straight onto a file that a ``torch.load`` in the file reads."""
        if not self.saves.loads:
            return []
        ctx = self.ctx
        loads = [(call, self.path_keys(arg_of(ctx, call, "f", 0), call)) for call in self.saves.loads]
        out = []
        for site in self.saves.sites:
            if not site.in_training_loop or site.saved.kinds() <= {META} or _is_temp_path(site.path):
                continue
            at = site.contexts[0]
            keys = self.path_keys(site.path, at)
            if not keys:
                continue
            # A load in the same loop as the save reads back what was just written (a round trip
            # in a test, an evaluation of the new file), not the file a restarted run resumes from.
            loop_ids = {id(l) for c in site.contexts for l in ctx.enclosing_loops(c)}
            for call, load_keys in loads:
                if not keys & load_keys or any(id(l) in loop_ids for l in ctx.enclosing_loops(call)):
                    continue
                if after_training_loop(ctx, call, site):
                    continue
                out.append(site)
                break
        return out


def _is_temp_path(path: ast.expr | None) -> bool:
    """A path built from a temporary file or directory (``tmp.name``, ``tempfile.mkstemp()``)."""
    if path is None:
        return False
    for node in ast.walk(path):
        text = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if text and re.search(r"(^|[._])(tmp|temp|tempfile)", text.lower()):
            return True
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.search(r"\.(tmp|temp)$|^/tmp/", node.value)
        ):
            return True
    return False
