"""The static engine itself: parsing, TD000, noqa, qualified names, values, fixes.

A small test-only rule (not in the registry) keeps these tests independent of real rules.
"""

from __future__ import annotations

import ast

import pytest

from traindoctor.check.engine import check_source, file_context
from traindoctor.config import Settings
from traindoctor.finding import Location
from traindoctor.rules.base import Rule
from traindoctor.static.args import MISSING, UNKNOWN
from traindoctor.static.context import FileContext, split_lines


class LoaderNoWorkers(Rule):
    """Test rule: DataLoader calls without num_workers; fix adds ``num_workers=2``."""

    code = "TD999"
    name = "test-rule"
    summary = "Test rule fired."

    def check(self, ctx):
        for call in ctx.calls_to("torch.utils.data.DataLoader"):
            value = ctx.arg_value(call, "num_workers", default=0)
            if value == 0:
                yield ctx.report(
                    self, call, "No workers.", fix=ctx.fix_add_keyword(call, "num_workers=2", "Add workers")
                )


def run(src: str, **kw):
    return check_source(src, "t.py", Settings(), [LoaderNoWorkers()], **kw)


def ctx_of(src: str) -> FileContext:
    return file_context("t.py", src, ast.parse(src), Settings())


@pytest.mark.parametrize(
    "src",
    [
        "from torch.utils.data import DataLoader as DL\nDL(ds)\n",
        "import torch.utils.data as tud\ntud.DataLoader(ds)\n",
        "import torch\ntorch.utils.data.DataLoader(ds)\n",
        "from torch.utils.data.dataloader import DataLoader\nDataLoader(ds)\n",
        "from torch.utils import data\ndata.DataLoader(ds)\n",
        "import torch.utils.data\nLoader = torch.utils.data.DataLoader\nLoader(ds)\n",
    ],
)
def test_qualified_names_resolve_through_aliases(src):
    assert [f.location.row for f in run(src).findings] == [src.count("\n")]


def test_unimported_name_is_not_resolved():
    assert run("DataLoader(ds)\n").findings == []
    assert run("from mylib import DataLoader\nDataLoader(ds)\n").findings == []


@pytest.mark.parametrize(
    "src,fires",
    [
        ("from torch.utils.data import DataLoader\nDataLoader(ds, 8, True, None, None, 4)\n", False),
        ("from torch.utils.data import DataLoader\nDataLoader(ds, 8, True, None, None, 0)\n", True),
        ("from torch.utils.data import DataLoader\nN = 4\nDataLoader(ds, num_workers=N)\n", False),
        ("from torch.utils.data import DataLoader\nN = 0\nDataLoader(ds, num_workers=N)\n", True),
        ("from torch.utils.data import DataLoader\nkw = dict(num_workers=4)\nDataLoader(ds, **kw)\n", False),
        ("from torch.utils.data import DataLoader\nkw = {'batch_size': 2}\nDataLoader(ds, **kw)\n", True),
        ("from torch.utils.data import DataLoader\ndef f(kw):\n    DataLoader(ds, **kw)\n", False),
        ("from torch.utils.data import DataLoader\ndef f(*a):\n    DataLoader(ds, *a)\n", False),
        ("from torch.utils.data import DataLoader\ndef f(n):\n    DataLoader(ds, num_workers=n)\n", False),
        ("from torch.utils.data import DataLoader\nimport os\nDataLoader(ds, num_workers=os.cpu_count())\n", False),
        ("from torch.utils.data import DataLoader\nN = 2\nN = 0\nDataLoader(ds, num_workers=N)\n", False),
    ],
)
def test_arguments_positional_kwargs_and_constants(src, fires):
    assert bool(run(src).findings) is fires


ARGPARSE = """\
import argparse
from torch.utils.data import DataLoader
p = argparse.ArgumentParser()
p.add_argument("--num-workers", type=int, default={default})
args = p.parse_args()
DataLoader(ds, num_workers=args.num_workers)
"""


@pytest.mark.parametrize("default,fires", [("0", True), ("4", False), ("'0'", True), ("os.cpu_count()", False)])
def test_argparse_defaults_are_read_back(default, fires):
    assert bool(run(ARGPARSE.format(default=default)).findings) is fires


def test_argparse_through_function_parameter():
    src = (
        "import argparse\nfrom torch.utils.data import DataLoader\n"
        "def main(args):\n    DataLoader(ds, num_workers=args.workers)\n"
        "if __name__ == '__main__':\n    p = argparse.ArgumentParser()\n"
        "    p.add_argument('-j', '--workers', default=0, type=int)\n    main(p.parse_args())\n"
    )
    assert [f.location.row for f in run(src).findings] == [4]


def test_config_object_attribute_is_unknown():
    src = "from torch.utils.data import DataLoader\nDataLoader(ds, num_workers=cfg.workers)\n"
    assert run(src).findings == []


def test_scopes_function_local_shadows_module_constant():
    ctx = ctx_of("N = 0\ndef f():\n    N = 4\n    return N\ndef g():\n    return N\n")
    names = [n for n in ctx.of(ast.Name) if n.id == "N" and isinstance(n.ctx, ast.Load)]
    assert [ctx.value(n) for n in names] == [4, 0]


def test_arg_lookup_sentinels():
    ctx = ctx_of("from torch.utils.data import DataLoader\nDataLoader(ds)\nDataLoader(ds, **opaque)\n")
    first, second = ctx.calls_to("torch.utils.data.DataLoader")
    assert ctx.arg(first, "num_workers") is MISSING
    assert ctx.arg(second, "num_workers") is UNKNOWN
    assert ctx.arg(first, "dataset").id == "ds"


@pytest.mark.parametrize(
    "src,expected",
    [
        ("x = 2 * 4 + 1\ny = x\n", 9),
        ("x = -3\ny = x\n", -3),
        ("x = min(8, 16)\ny = x\n", 8),
        ("x = 8 if flag else 8\ny = x\n", 8),
        ("x = 8 if flag else 16\ny = x\n", UNKNOWN),
        ("x = 1\nx += 1\ny = x\n", UNKNOWN),
        ("for x in range(3):\n    pass\ny = x\n", UNKNOWN),
        ("x = 2 ** 1000\ny = x\n", UNKNOWN),
    ],
)
def test_constant_propagation(src, expected):
    ctx = ctx_of(src)
    last = ctx.tree.body[-1]
    assert ctx.value(last.value) == expected if expected is not UNKNOWN else ctx.value(last.value) is UNKNOWN


def test_targets_cuda_detection():
    assert ctx_of("model.cuda()\n").targets_cuda
    assert ctx_of("x.to('cuda:0')\n").targets_cuda
    assert ctx_of("import torch\nd = 'cuda' if torch.cuda.is_available() else 'cpu'\n").targets_cuda
    assert not ctx_of("import torch\nx = torch.zeros(3, device='cpu')\n").targets_cuda


# ---------------------------------------------------------------- noqa
@pytest.mark.parametrize(
    "suffix,suppressed",
    [
        ("  # noqa", True),
        ("  # noqa: TD999", True),
        ("  # NOQA:TD999,TD101", True),
        ("  # noqa: TD9", True),
        ("  # noqa: TD101", False),
        ("  # a comment", False),
    ],
)
def test_noqa(suffix, suppressed):
    src = f"from torch.utils.data import DataLoader\nDataLoader(ds){suffix}\n"
    assert (run(src).findings == []) is suppressed


# ---------------------------------------------------------------- parse errors
@pytest.mark.parametrize(
    "data,needle",
    [
        (b"def f(:\n", "SyntaxError"),
        (b"\x00\x01\x02", "null bytes"),
        (b"x = '\xff\xfe'\n", "not valid text"),
        (b"# -*- coding: nope -*-\nx = 1\n", "not valid text"),
        (b"(" * 300 + b")" * 300 + b"\n", "nested"),
    ],
)
def test_bad_input_is_one_td000_finding(data, needle):
    result = check_source(data, "bad.py", Settings(), [LoaderNoWorkers()])
    assert [f.code for f in result.findings] == ["TD000"]
    assert needle in result.findings[0].message or (needle == "nested" and "nest" in result.findings[0].message)


def test_deeply_nested_expression_is_reported_not_raised():
    data = ("x = " + "[" * 5000 + "]" * 5000 + "\n").encode()
    result = check_source(data, "deep.py", Settings(), [LoaderNoWorkers()])
    assert [f.code for f in result.findings] == ["TD000"]


def test_latin1_file_with_cookie_parses():
    data = "# -*- coding: latin-1 -*-\nfrom torch.utils.data import DataLoader\nname = 'café'\nDataLoader(ds)\n".encode(
        "latin-1"
    )
    result = check_source(data, "l.py", Settings(), [LoaderNoWorkers()])
    assert [f.location.row for f in result.findings] == [4]


# ---------------------------------------------------------------- locations and fixes
def test_columns_count_characters_not_bytes():
    src = "from torch.utils.data import DataLoader\nx = ('é', DataLoader(ds))\n"
    (f,) = run(src).findings
    assert f.location == Location(2, 11)
    assert f.end_location == Location(2, 25)
    fixed = run(src, fix=True).fixed_source
    assert fixed == "from torch.utils.data import DataLoader\nx = ('é', DataLoader(ds, num_workers=2))\n"


def test_fix_keeps_other_bytes_and_crlf():
    src = "from torch.utils.data import DataLoader\r\nDataLoader(\r\n    ds,\r\n    batch_size=4,\r\n)  # keep\r\n"
    result = run(src, fix=True)
    assert result.fixed_source == (
        "from torch.utils.data import DataLoader\r\nDataLoader(\r\n    ds,\r\n    batch_size=4, num_workers=2,\r\n)  # keep\r\n"
    )
    assert result.findings == []
    assert run(result.fixed_source, fix=True).fixed_source is None


def test_fix_empty_call_and_multiple_findings_in_one_file():
    src = "from torch.utils.data import DataLoader\na = DataLoader()\nb = DataLoader(ds)\n"
    result = run(src, fix=True)
    assert result.fixed_source == (
        "from torch.utils.data import DataLoader\na = DataLoader(num_workers=2)\nb = DataLoader(ds, num_workers=2)\n"
    )
    assert result.fixes_applied == 2


def test_nested_fixes_converge_over_passes():
    src = "from torch.utils.data import DataLoader\nDataLoader(DataLoader(ds))\n"
    result = run(src, fix=True)
    assert result.fixed_source == (
        "from torch.utils.data import DataLoader\nDataLoader(DataLoader(ds, num_workers=2), num_workers=2)\n"
    )
    ast.parse(result.fixed_source)


def test_crashing_rule_is_recorded_and_others_still_run():
    class Broken(Rule):
        code = "TD998"
        name = "broken"
        summary = "Broken."

        def check(self, ctx):
            raise ValueError("boom")

    src = "from torch.utils.data import DataLoader\nDataLoader(ds)\n"
    result = check_source(src, "t.py", Settings(), [Broken(), LoaderNoWorkers()])
    assert [f.code for f in result.findings] == ["TD999"]
    assert any("TD998" in e and "boom" in e for e in result.internal_errors)


def test_output_is_sorted_and_deterministic():
    src = "from torch.utils.data import DataLoader\n" + "".join(f"DataLoader(d{i})\n" for i in range(20))
    rows = [f.location.row for f in run(src).findings]
    assert rows == sorted(rows) == list(range(2, 22))


def test_split_lines_matches_python_line_numbers():
    src = "a = 1\x0cb\nc = 2\r\nd = 3\re = 4\n"
    lines = split_lines(src)
    assert len(lines) == 4
