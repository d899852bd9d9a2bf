"""What the seed finders of ``seed_finders.py`` read a repository with: its modules parsed once,
a parent map, source text of nodes, the roles of names (optimizer, scheduler, scaler), and the
minimal edits a seed applies.

An edit never changes the number of lines of its file, so a finding's row in the edited tree
compares directly with the same row in the unedited tree.
"""

from __future__ import annotations

import ast
import io
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: Words that mark a name as evaluation-only (``val_loader``, ``build_test_set``, ``evaluate``).
EVAL_WORDS = frozenset(
    {"val", "valid", "validation", "validate", "test", "testing", "eval", "evaluation", "evaluate", "evaluator"}
    | {"inference", "infer", "predict", "prediction", "calib", "calibration", "demo", "query", "gallery", "dev"}
)
#: Calls that make an optimizer, a learning-rate scheduler or a gradient scaler, by their last name.
OPTIMIZER_CALLS = re.compile(
    r"^(SGD|Adam|AdamW|Adamax|NAdam|RAdam|RMSprop|Adagrad|Adadelta|LBFGS|ASGD|Rprop|SparseAdam|LAMB|Lamb|LARS|Lars"
    r"|Adafactor|Lion|FusedAdam|FusedLAMB|DeepSpeedCPUAdam|AdamW8bit|PagedAdamW|ZeroRedundancyOptimizer"
    r"|(create|build|get|make|init|setup)_optimi[sz]er\w*|configure_optimizers)$"
)
SCHEDULER_CALLS = re.compile(
    r"^(\w*LR|ReduceLROnPlateau|CosineAnnealingWarmRestarts|\w*Scheduler|get_\w*schedule\w*"
    r"|(create|build|get|make)_(lr_)?scheduler\w*)$"
)
SCALER_CALLS = re.compile(r"^(GradScaler|ShardedGradScaler|NativeScaler\w*|\w*LossScaler)$")
#: Names of the gradient-mode contexts and decorators a no_grad seed removes.
NO_GRAD = frozenset({"torch.no_grad()", "no_grad()", "torch.inference_mode()", "inference_mode()"})
NO_GRAD |= frozenset({"torch.set_grad_enabled(False)", "torch.autograd.no_grad()"})


def words(text: str) -> set[str]:
    """The lower-case words of identifiers in ``text`` (``valLoader_2`` -> ``{val, loader}``)."""
    spaced = re.sub(r"([a-z])([A-Z])", r"\1 \2", text)
    return set(re.findall(r"[a-z]+", spaced.lower()))


def is_eval_name(text: str) -> bool:
    """Whether ``text`` names something evaluation-only."""
    return bool(words(text) & EVAL_WORDS)


def is_train_name(text: str) -> bool:
    """Whether ``text`` names something for training (``train_loader``, ``trainset``)."""
    return any(w.startswith("train") for w in words(text))


def role(receiver: str) -> str:
    """What a name holds by its last part: ``optimizer``, ``scheduler``, ``scaler`` or ``other``
    (``self.optimizer_G`` is an optimizer, ``lr_scheduler`` a scheduler, ``loss_scaler`` a scaler)."""
    last = receiver.rsplit(".", 1)[-1].lower()
    if "scaler" in last:
        return "scaler"
    if "sched" in last:
        return "scheduler"
    if "optim" in last or re.search(r"(^|_)opt(_|$|[a-z0-9]?$)", last):
        return "optimizer"
    return "other"


def last_name(node: ast.AST) -> str:
    """The called name's last part: ``DataLoader`` for ``torch.utils.data.DataLoader(...)``."""
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def text(node: ast.AST) -> str:
    """The node as source text (normalised by ``ast.unparse``)."""
    return ast.unparse(node)


@dataclass(frozen=True)
class Edit:
    """Replace the text from (``line``, ``col``) to (``end_line``, ``end_col``) with ``text``.
    Lines are 1-based, columns 0-based UTF-8 byte offsets, as in ``ast``."""

    line: int
    col: int
    end_line: int
    end_col: int
    text: str

    def apply(self, source: bytes) -> bytes:
        """``source`` with the edit applied; removed line breaks are put back after the new
        text, so every later line keeps its number."""
        lines = io.BytesIO(source).readlines()
        start = sum(len(x) for x in lines[: self.line - 1]) + self.col
        end = sum(len(x) for x in lines[: self.end_line - 1]) + self.end_col
        new = self.text.encode()
        pad = source[start:end].count(b"\n") - new.count(b"\n")
        return source[:start] + new + b"\n" * max(pad, 0) + source[end:]


def node_edit(node: ast.AST, new: str) -> Edit:
    """Replace ``node``'s own text with ``new``."""
    return Edit(node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0, new)


@dataclass
class Module:
    """One parsed source file of a repository."""

    path: str
    source: bytes
    tree: ast.Module
    parents: dict[ast.AST, ast.AST] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for parent in ast.walk(self.tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
        self.lines = io.BytesIO(self.source).readlines()
        self.text = self.source.decode("utf-8", "replace")

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        """The nodes enclosing ``node``, innermost first."""
        while node in self.parents:
            node = self.parents[node]
            yield node

    def function_of(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The innermost function around ``node``."""
        for up in self.ancestors(node):
            if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef):
                return up
        return None

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The innermost function around ``node``, or the module."""
        return self.function_of(node) or self.tree

    def span(self, node: ast.AST) -> tuple[int, int]:
        """First and last line of ``node`` (the whole file for the module)."""
        if isinstance(node, ast.Module):
            return 1, max(len(self.lines), 1)
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return first, node.end_lineno or node.lineno

    def in_loop(self, node: ast.AST, scope: ast.AST) -> bool:
        """Whether a ``for``/``while`` loop inside ``scope`` encloses ``node``."""
        for up in self.ancestors(node):
            if up is scope:
                return False
            if isinstance(up, ast.For | ast.AsyncFor | ast.While):
                return True
        return False

    def remove_argument(self, arg: ast.keyword | ast.expr) -> Edit:
        """Delete one argument of a call and the comma that separated it from its neighbour."""
        return self._remove_span(arg.lineno, arg.col_offset, arg.end_lineno or arg.lineno, arg.end_col_offset or 0)

    def remove_dict_item(self, node: ast.Dict, index: int) -> Edit:
        """Delete the ``index``-th ``key: value`` pair of a dict literal and its comma."""
        key, value = node.keys[index], node.values[index]
        assert key is not None
        return self._remove_span(
            key.lineno, key.col_offset, value.end_lineno or value.lineno, value.end_col_offset or 0
        )

    def _remove_span(self, line: int, col: int, end_line: int, end_col: int) -> Edit:
        """Delete an item of a comma-separated list: with the comma after it when there is one
        (``a, ITEM, b`` -> ``a, b``), else with the comma before it (``a, ITEM`` -> ``a``)."""
        rest = self.lines[end_line - 1][end_col:]
        if rest.lstrip(b" \t").startswith(b","):
            after_comma = rest.lstrip(b" \t")[1:]
            end_col += len(rest) - len(after_comma.lstrip(b" "))
            return Edit(line, col, end_line, end_col, "")
        prev_line, prev_col = line, col
        while True:
            before = self.lines[prev_line - 1][:prev_col].rstrip(b" \t\r\n")
            if before.endswith(b","):
                return Edit(prev_line, len(before) - 1, end_line, end_col, "")
            if before or prev_line == 1:
                return Edit(line, col, end_line, end_col, "")
            prev_line -= 1
            prev_col = len(self.lines[prev_line - 1])

    def statement_to_pass(self, stmt: ast.stmt) -> Edit:
        """Replace a whole statement with ``pass`` (valid wherever the statement was)."""
        return node_edit(stmt, "pass")


def parse_modules(root: Path, paths: list[str]) -> list[Module]:
    """The Python files among ``paths`` (relative to ``root``) that parse."""
    modules = []
    for path in paths:
        if not path.endswith(".py"):
            continue
        source = (root / path).read_bytes()
        try:
            tree = ast.parse(source)
        except (SyntaxError, ValueError):
            continue
        modules.append(Module(path, source, tree))
    return modules


def is_test_or_demo(path: str) -> bool:
    """Unit tests, documentation and setup scripts: not training code to seed."""
    parts = Path(path).parts
    name = parts[-1]
    folders = {p.lower() for p in parts[:-1]}
    return (
        name.startswith("test_")
        or name.endswith("_test.py")
        or name in ("conftest.py", "setup.py")
        or bool(folders & {"tests", "test", "docs", "doc", "unittests"})
    )
