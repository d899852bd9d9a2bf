"""The engine's shortcuts answer exactly what the plain computation answers.

Each shortcut that keeps ``traindoctor check`` close to ``ast.parse`` (see
``benchmarks/lint_speed.py``) has a plain definition it must agree with: the trigger-word test,
the C-level position sort, the memoised ``scope_of``, the short-circuiting ``imports_project``,
the spelled-name pre-filter of ``mentions``, and the release of a file's analyses (its tree is
freed by reference counting, not left for the cycle collector).
"""

from __future__ import annotations

import ast
import gc
import weakref

import pytest

from traindoctor.check.engine import _TRAINING_WORDS, _WordTest, check_source, file_context, instantiate
from traindoctor.config import Settings
from traindoctor.registry import all_rules
from traindoctor.rules.base import Rule
from traindoctor.static.context import FileContext, _position
from traindoctor.static.names import CANONICAL
from traindoctor.static.project import ProjectView, import_bindings, project_for

TRAINING_SCRIPT = """\
import torch
from torch.utils.data import DataLoader
from torch.cuda.amp import autocast as ac

def evaluate(model, val_loader):
    with torch.no_grad():
        return [model(x) for x, _ in val_loader]

def main():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(ds, batch_size=32)
    (a, b), c = (1, 2), 3
    for epoch in range(3):
        for x, y in loader:
            with ac():
                loss = model(x).sum()
            loss.backward()
            opt.step()
        print(f"{epoch:>3} {loss.item():.3f}", f"a{b}c{c!r:>{a}}d")
        torch.save({"model": model.state_dict()}, "ckpt.pt")
"""


def ctx_of(src: str) -> FileContext:
    return file_context("t.py", src, ast.parse(src), Settings())


@pytest.mark.parametrize("source", [TRAINING_SCRIPT, "x = 1\n", "model.eval()\nval = 3\n", ""])
def test_word_test_agrees_with_searching_each_rule_s_words(source):
    present = _WordTest(source)
    for rule in instantiate(Settings().enabled_codes()):
        assert present.any(rule.triggers) == any(t in source for t in rule.triggers), rule.code
    assert present.any(_TRAINING_WORDS) == any(w in source for w in _TRAINING_WORDS)


def test_rules_without_a_check_of_their_own_do_not_count_as_active():
    # TD000 only names the parse-error finding; a file that only it would see builds nothing
    assert [r.code for r in all_rules() if r.static and r.check is Rule.check] == ["TD000"]
    result = check_source("x = 1\n", "t.py", Settings(), instantiate(["TD000"]))
    assert result.findings == []


def test_nodes_come_in_source_order_with_ties_kept_in_walk_order():
    ctx = ctx_of(TRAINING_SCRIPT)
    for kinds in [
        (ast.Constant,),
        (ast.Call,),
        (ast.Name,),
        (ast.comprehension,),
        (ast.withitem,),
        (ast.With, ast.For),
        (ast.Call, ast.Attribute, ast.keyword),
        (ast.arguments, ast.arg),
    ]:
        expected: list[ast.AST] = []
        for kind in kinds:
            expected.extend(ctx.nodes.get(kind, ()))  # the walk's order, before any sort
        expected.sort(key=_position)
        assert ctx.of(*kinds) == expected, kinds


def test_memoised_scope_of_is_the_innermost_enclosing_scope():
    ctx = ctx_of(TRAINING_SCRIPT + "\nclass A:\n    f = lambda self: [y for y in self]\n")
    scopes = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
    nodes = [n for kind in list(ctx.nodes) for n in ctx.of(kind)]
    for node in nodes + nodes[::-1]:  # ask twice, in two orders, so that memoised answers are used
        expected = next((a for a in ctx.ancestors(node) if isinstance(a, scopes)), ctx.tree)
        assert ctx.scope_of(node) is expected


def test_canonical_names_keep_their_last_part_as_mentions_assumes():
    assert all(k.rsplit(".", 1)[-1] == v.rsplit(".", 1)[-1] for k, v in CANONICAL.items())


@pytest.mark.parametrize(
    "src,expected",
    [
        ("from torch.nn import SyncBatchNorm as S\nS\n", True),
        ("import torch\nm = torch.nn.SyncBatchNorm.convert_sync_batchnorm(m)\n", True),
        ("import torch.nn as nn\nx = nn.BatchNorm2d(3)\n", False),
        ("import torch\nSyncBatchNorm = 1\nSyncBatchNorm\n", False),
    ],
)
def test_mentions(src, expected):
    ctx = ctx_of(src)
    assert ctx.mentions("torch.nn.SyncBatchNorm", "torch.nn.SyncBatchNorm.convert_sync_batchnorm") is expected


def test_imports_project_stops_early_but_agrees_with_the_full_bindings(tmp_path):
    (tmp_path / "pyproject.toml").write_text("")
    (tmp_path / "utils.py").write_text("def f():\n    return 1\n")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text("X = 1\n")
    cases = {
        "none.py": "import os\nimport torch\n",
        "one.py": "import os\nfrom utils import f\n",
        "late.py": "import os\nimport json\nfrom pkg import mod\n",
        "star.py": "from utils import *\n",
    }
    for name, src in cases.items():
        path = tmp_path / name
        path.write_text(src)
        ctx = file_context(str(path), src, ast.parse(src), Settings())
        project = project_for(str(path))
        assert project is not None
        fast = ProjectView(ctx, project, path.resolve()).imports_project
        nodes = ctx.of(ast.Import, ast.ImportFrom)
        full = ProjectView(ctx, project, path.resolve())
        assert fast == (bool(import_bindings(nodes, project, path.resolve())) or bool(full._star_modules())), name
        assert fast == (name != "none.py")


def test_a_checked_file_s_tree_is_freed_without_the_cycle_collector(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(TRAINING_SCRIPT)
    (tmp_path / "pyproject.toml").write_text("")
    rules = instantiate(Settings().enabled_codes())
    tree = ast.parse(TRAINING_SCRIPT)
    ref = weakref.ref(tree)
    ctx = file_context(str(path), TRAINING_SCRIPT, tree, Settings())
    del tree
    gc.disable()
    try:
        for rule in rules:
            list(rule.check(ctx))
        assert ctx.project is not None and ctx._shared  # analyses that point back at ctx were built
        ctx.release()
        del ctx
        assert ref() is None  # freed by reference counting alone
    finally:
        gc.enable()


def test_findings_are_the_same_after_the_release():
    first = check_source(TRAINING_SCRIPT, "t.py", Settings())
    again = check_source(TRAINING_SCRIPT, "t.py", Settings())
    assert first.findings == again.findings and first.findings


def test_spelled_name_prefilters_hold_for_their_word_lists():
    from traindoctor.facts.checkpoint.static.vocabulary import SAVE_WRAPPERS

    assert all("save_on_ma" in name for name in SAVE_WRAPPERS)


def test_prefilters_do_not_skip_files_whose_identifiers_python_normalises():
    # ``ｒequires_grad`` (a fullwidth letter) is the identifier ``requires_grad`` to Python
    src = "import torch\nfrom torch.nn import ＳyncBatchNorm\nＳyncBatchNorm\np.ｒequires_grad = False\n"
    ctx = ctx_of(src)
    assert ctx.mentions("torch.nn.SyncBatchNorm")
    from traindoctor.facts.evaluation.static import freezes_parameters

    assert freezes_parameters(ctx)
