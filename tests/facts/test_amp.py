"""Mixed-precision facts (facts/amp/static.py): the dtype and enabled flag of each autocast region as
written, and odd code the analysis must survive.
"""

from __future__ import annotations

import ast
import textwrap

import pytest
from helpers.snippets import amp_run

from traindoctor.check.engine import file_context
from traindoctor.config import Settings
from traindoctor.facts.amp.static import BFLOAT16, FLOAT16, amp_facts


def facts_of(src: str):
    source = textwrap.dedent(src).lstrip("\n")
    ctx = file_context("x.py", source, ast.parse(source), Settings())
    return amp_facts(ctx)


@pytest.mark.parametrize(
    "expr,dtype",
    [
        ('torch.autocast("cuda")', FLOAT16),
        ('torch.autocast("cuda:0")', FLOAT16),
        ('torch.autocast("cpu")', BFLOAT16),
        ("torch.cuda.amp.autocast()", FLOAT16),
        ("torch.cpu.amp.autocast()", BFLOAT16),
        ('torch.autocast("cuda", dtype=torch.bfloat16)', BFLOAT16),
        ('torch.autocast("cuda", torch.bfloat16)', BFLOAT16),
        ("torch.cuda.amp.autocast(True, torch.bfloat16)", BFLOAT16),
        ('torch.amp.autocast(device_type="cpu", dtype=torch.half)', FLOAT16),
        ('torch.autocast("cuda", dtype=AMP_DTYPES[args.dtype])', None),
        ('torch.autocast("xla")', None),
        ("torch.autocast(device_type=dev.type)", None),  # nothing in the file targets CUDA
        ('torch.autocast("cuda", **amp_kwargs)', None),
    ],
)
def test_autocast_dtype_resolution(expr, dtype):
    facts = facts_of(f"import torch\nwith {expr}:\n    y = f(x)\n")
    [region] = facts.autocasts
    assert region.dtype == dtype


def test_autocast_through_binding_conditional_and_partial():
    facts = facts_of(
        """
        import contextlib
        import functools
        import torch

        a = torch.autocast("cuda", dtype=torch.bfloat16)
        b = contextlib.nullcontext() if cpu else torch.autocast(device_type="cpu")
        c = functools.partial(torch.autocast, "cuda", dtype=torch.float16)
        with a:
            pass
        with b:
            pass
        with c():
            pass
        with contextlib.nullcontext():
            pass
        """
    )
    assert [(r.site.lineno, r.dtype) for r in facts.autocasts] == [
        (8, BFLOAT16),
        (10, BFLOAT16),
        (12, FLOAT16),
    ]


def test_enabled_flag_literal_constant_and_argparse():
    facts = facts_of(
        """
        import argparse
        import torch

        USE_AMP = False
        p = argparse.ArgumentParser()
        p.add_argument("--amp", action="store_true")
        args = p.parse_args()
        with torch.autocast("cuda", enabled=False):
            pass
        with torch.autocast("cuda", enabled=USE_AMP):
            pass
        with torch.autocast("cuda", enabled=args.amp):
            pass
        with torch.autocast("cuda"):
            pass
        """
    )
    assert [r.enabled for r in facts.autocasts] == [False, False, None, True]


@pytest.mark.parametrize(
    "src",
    [
        "import torch\nwith torch.autocast:\n    pass\n",
        "import torch\nwith torch.autocast(*a, **k):\n    loss.backward()\n",
        "import torch\nx.backward(); y.step(); scaler.step()\n",
        "import torch\ntorch.cuda.amp.GradScaler(*args)\n",
        "import torch\nf = lambda: torch.autocast('cuda')\nwith f():\n    loss.backward()\n",
        "import torch\ntorch.autograd.backward()\n",
        "model.half(1)\nmodel.to()\n",
    ],
)
def test_odd_code_never_crashes(src):
    amp_run(src)
