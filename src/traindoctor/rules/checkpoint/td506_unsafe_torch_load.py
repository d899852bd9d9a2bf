"""TD506 unsafe-torch-load: ``torch.load`` that unpickles arbitrary objects."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.args import MISSING, UNKNOWN

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


class UnsafeTorchLoad(Rule):
    code = "TD506"
    name = "unsafe-torch-load"
    severity = Severity.WARNING
    summary = (
        "`torch.load` with `weights_only=False` (or, before PyTorch 2.6, without `weights_only`) can "
        "run arbitrary code from the file; pass `weights_only=True`."
    )
    gpu_only = False
    static = True
    runtime = False
    triggers = ("load",)
    fixable = "sometimes"

    what_it_does = """
Reports `torch.load(..., weights_only=False)`, and a `torch.load` call without `weights_only`
when the code must support a PyTorch older than 2.6 (where the default is `False`). The minimum
version comes from `--min-torch-version` or `min-torch-version` in `[tool.traindoctor]`, else from
the installed torch's package metadata, else it is assumed current. A `weights_only` whose value the
checker cannot determine is left alone, and so are test modules (`test_*.py`, `*_test.py`) and
`test_*` functions: they read back the files they wrote themselves.
"""
    why_bad = """
With `weights_only=False`, `torch.load` unpickles the file, and unpickling can import and call
arbitrary Python callables: a checkpoint downloaded from the internet or shared by someone else can
run any code on your machine when loaded. `weights_only=True` restricts the unpickler to tensors,
primitive types, dicts/lists and the types allow-listed with
`torch.serialization.add_safe_globals`, which is all a `state_dict` checkpoint needs. PyTorch 2.6
made `weights_only=True` the default; on older versions the default is the unsafe one.
"""
    example = """
ckpt = torch.load("ckpt.pt", map_location="cpu", weights_only=False)
"""
    use_instead = """
ckpt = torch.load("ckpt.pt", map_location="cpu", weights_only=True)

# a checkpoint that stores extra trusted types (e.g. an argparse Namespace):
torch.serialization.add_safe_globals([argparse.Namespace])
ckpt = torch.load("ckpt.pt", weights_only=True)
"""
    fix_safety = """
The fix (`weights_only=False` -> `weights_only=True`, or adding `weights_only=True`) is unsafe: a
checkpoint that pickles objects other than tensors and plain containers (a whole `nn.Module`, an
`argparse.Namespace`, NumPy arrays on older PyTorch versions) then fails to load until those types
are allow-listed with `torch.serialization.add_safe_globals`, or the checkpoint is re-saved as
plain state dicts.
"""
    references = (
        "https://pytorch.org/docs/stable/generated/torch.load.html",
        "https://pytorch.org/docs/stable/notes/serialization.html#weights-only",
        "https://docs.python.org/3/library/pickle.html",
    )

    valid = (
        Valid(
            """
            import torch

            state = torch.load("ckpt.pt", map_location="cpu", weights_only=True)
            """
        ),
        # Bare call, but the code only supports PyTorch >= 2.6 (safe default).
        Valid(
            """
            import torch

            model.load_state_dict(torch.load(args.checkpoint))
            """,
            settings={"min-torch-version": "2.6"},
        ),
        # The value comes from elsewhere: cannot tell, stay silent.
        Valid(
            """
            import torch

            def load(path, trusted):
                return torch.load(path, weights_only=not trusted)
            """,
            settings={"min-torch-version": "2.4"},
        ),
        # Not torch.load.
        Valid(
            """
            import pickle
            import torch

            with open("meta.pkl", "rb") as f:
                meta = pickle.load(f)
            weights = torch.load("w.pt", weights_only=True, mmap=True)
            """
        ),
    )
    invalid = (
        Invalid(
            """
            import torch

            ckpt = torch.load("ckpt.pt", map_location="cpu", weights_only=False)  # TD506
            """,
            unsafe_fixed="""
            import torch

            ckpt = torch.load("ckpt.pt", map_location="cpu", weights_only=True)  # TD506
            """,
        ),
        # Aliases, and a literal **kwargs dict.
        Invalid(
            """
            from torch import load as tload
            import torch as th

            LOAD_KW = {"map_location": "cpu", "weights_only": False}
            a = tload("a.pt", **LOAD_KW)  # TD506
            b = th.load(f="b.pt", weights_only=False)  # TD506
            """,
            unsafe_fixed="""
            from torch import load as tload
            import torch as th

            LOAD_KW = {"map_location": "cpu", "weights_only": True}
            a = tload("a.pt", **LOAD_KW)  # TD506
            b = th.load(f="b.pt", weights_only=True)  # TD506
            """,
        ),
        # Bare call when PyTorch 2.4 must be supported.
        Invalid(
            """
            import torch

            model.load_state_dict(torch.load(args.checkpoint))  # TD506
            opt.load_state_dict(torch.load(args.opt_state, "cpu"))  # TD506
            """,
            settings={"min-torch-version": "2.4"},
            unsafe_fixed="""
            import torch

            model.load_state_dict(torch.load(args.checkpoint, weights_only=True))  # TD506
            opt.load_state_dict(torch.load(args.opt_state, "cpu", weights_only=True))  # TD506
            """,
        ),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.checkpoint.static.vocabulary import LOAD_FUNCS

        calls = ctx.calls_to(*LOAD_FUNCS)
        if not calls:
            return
        from traindoctor.facts.data.static import is_test_module

        if is_test_module(ctx.filename):
            return  # a test reads back the file it wrote
        old_default = ctx.settings.torch_below("2.6")
        for call in calls:
            fn = ctx.function_of(call)
            if fn is not None and getattr(fn, "name", "").startswith("test_"):
                continue
            node = ctx.arg(call, "weights_only", "torch.load")
            if node is UNKNOWN:
                continue
            if node is MISSING:
                if not old_default:
                    continue
                fix = ctx.fix_add_keyword(call, "weights_only=True", "Pass `weights_only=True`", applicability="unsafe")
                yield ctx.report(
                    self,
                    call,
                    "Before PyTorch 2.6 `torch.load` unpickles arbitrary objects by default, which "
                    "can run code from the file; pass `weights_only=True`.",
                    fix=fix,
                    help="Pass `weights_only=True`",
                )
                continue
            if ctx.value(node) is not False:
                continue
            fix = None
            if isinstance(node, ast.Constant):
                fix = ctx.fix_replace(node, "True", "Use `weights_only=True`", applicability="unsafe")
            yield ctx.report(
                self,
                call,
                "`torch.load(..., weights_only=False)` unpickles arbitrary objects, which can run "
                "code from the file; use `weights_only=True`.",
                fix=fix,
                help="Use `weights_only=True`",
            )
