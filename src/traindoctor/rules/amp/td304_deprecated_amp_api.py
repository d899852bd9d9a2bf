"""TD304 deprecated-amp-api: ``torch.cuda.amp.autocast`` / ``GradScaler`` instead of ``torch.amp``."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from traindoctor.finding import Edit, Finding, Fix, Location, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext


def _start(finding: Finding) -> tuple[int, int]:
    """Where a finding of this file starts (``FileContext.report`` always sets its location)."""
    location = cast(Location, finding.location)
    return (location.row, location.column)


#: Deprecated callable -> (replacement after the torch module name, device, minimum torch).
_DEPRECATED: dict[str, tuple[str, str, str]] = {
    "torch.cuda.amp.autocast": ("autocast", "cuda", "1.10"),
    "torch.cpu.amp.autocast": ("autocast", "cpu", "1.10"),
    "torch.cuda.amp.GradScaler": ("amp.GradScaler", "cuda", "2.3"),
    "torch.cpu.amp.GradScaler": ("amp.GradScaler", "cpu", "2.3"),
    "torch.cpu.amp.grad_scaler.GradScaler": ("amp.GradScaler", "cpu", "2.3"),
}


class DeprecatedAmpApi(Rule):
    code = "TD304"
    name = "deprecated-amp-api"
    severity = Severity.INFO
    summary = (
        "`torch.cuda.amp.autocast` / `torch.cuda.amp.GradScaler` are deprecated; use "
        '`torch.autocast("cuda", ...)` / `torch.amp.GradScaler("cuda", ...)` instead.'
    )
    gpu_only = False
    static = True
    triggers = ("cuda.amp", "cpu.amp", "cuda import amp", "cpu import amp", "apex", "precision")
    project_aware = True
    runtime = False
    fixable = "sometimes"

    what_it_does = """
        Finds calls of the device-specific AMP entry points `torch.cuda.amp.autocast`,
        `torch.cuda.amp.GradScaler`, `torch.cpu.amp.autocast` and `torch.cpu.amp.GradScaler`,
        however they are imported (`from torch.cuda.amp import autocast, GradScaler`,
        `import torch.cuda.amp as amp`, aliases), including their use as a decorator.

        Also the framework spellings of the same outdated choice: NVIDIA apex's
        `amp.initialize(...)` and `amp.scale_loss(...)` (apex itself tells users to move to
        `torch.amp`; no autofix, the migration changes code around the call), and Lightning's
        legacy `Trainer(precision=16)` / `Fabric(precision=16)` (also `"16"` and `"bf16"`), which
        Lightning 2.x still accepts with a warning as aliases of `"16-mixed"` / `"bf16-mixed"`. A
        file written for Lightning 1.x (the project pins `pytorch-lightning<2`, or the file uses
        what 2.0 removed, such as `Trainer(gpus=...)` or `training_epoch_end`) is left alone:
        1.x has no `"16-mixed"`.

        Inference code is left alone: an entry script that loads a trained model while no
        backward pass nor optimizer is reachable from it (in the file or the project functions and
        classes it calls), and library functions whose only users in the project are such scripts
        (a `transcribe()` that `transcribe.py` and a server call, never a training script).
    """
    why_bad = """
        Since PyTorch 2.4 these spellings emit a `FutureWarning` on every construction and are
        thin wrappers over the device-generic API, which takes the device type as its first
        argument: `torch.autocast("cuda", ...)` and `torch.amp.GradScaler("cuda", ...)`. The
        generic API is the one that is documented and kept current (new devices, new dtypes),
        and it makes the device explicit, which also lets the same code run on CPU. The
        behaviour is the same.
    """
    example = """
        from torch.cuda.amp import GradScaler, autocast

        scaler = GradScaler()
        with autocast(dtype=torch.float16):
            loss = model(x).mean()
    """
    use_instead = """
        scaler = torch.amp.GradScaler("cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = model(x).mean()
    """
    fix_safety = """
        The fix is safe: the old classes call the new ones with the same arguments. It rewrites
        the callee, inserts the device type as the first argument, and turns positional
        arguments of `autocast` into keywords (its positional order differs: the old
        `autocast(enabled, dtype)` versus the new `autocast(device_type, dtype, enabled)`). It
        is offered only where the module `torch` is imported at module level (the new spelling
        needs it) and no positional argument comes from `*args`; the old import line is left in
        place. Autocast is reported only when the minimum PyTorch is at least 1.10, GradScaler
        only from 2.3 (when `torch.amp.GradScaler` appeared). Lightning's `precision=16` is
        rewritten to `precision="16-mixed"` (the same setting, spelled as Lightning asks); apex
        calls get no fix.
    """
    references = (
        "https://pytorch.org/docs/stable/amp.html",
        "https://github.com/pytorch/pytorch/pull/126062",
    )

    valid = (
        Valid(
            """
            import torch

            scaler = torch.amp.GradScaler("cuda")
            with torch.autocast("cuda", dtype=torch.float16):
                loss = model(x).mean()
            """
        ),
        Valid(
            """
            from torch import autocast
            from torch.amp import GradScaler

            scaler = GradScaler(device="cuda", init_scale=1024)
            with autocast(device_type="cpu"):
                y = model(x)
            """
        ),
        Valid(
            """
            import torch

            # custom_fwd/custom_bwd and the module itself are not the deprecated constructors
            amp_module = torch.cuda.amp
            print(torch.cuda.amp.__doc__)
            """
        ),
        Valid(
            """
            import torch

            scaler = torch.cuda.amp.GradScaler()
            """,
            settings={"min-torch-version": "2.1"},
        ),
        Valid(
            """
            import lightning.pytorch as pl

            # the current spellings; 32/64 are not mixed precision at all
            trainer = pl.Trainer(precision="16-mixed")
            full = pl.Trainer(precision=32)
            """
        ),
        Valid(
            """
            # a local module that happens to be called amp is not apex
            import amp

            amp.initialize(config)
            """
        ),
        Valid(
            """
            import torch

            # an inference script of a trained checkpoint: nothing trains here
            def main(loader):
                model = torch.load("checkpoint.pth", weights_only=False)
                model.eval()
                with torch.no_grad(), torch.cuda.amp.autocast():
                    return [model(x) for x, _ in loader]

            if __name__ == "__main__":
                main(test_loader)
            """
        ),
    )

    invalid = (
        Invalid(
            """
            from apex import amp

            model, optimizer = amp.initialize(model, optimizer, opt_level="O1")  # TD304
            for x, y in loader:
                loss = criterion(model(x), y)
                with amp.scale_loss(loss, optimizer) as scaled_loss:  # TD304
                    scaled_loss.backward()
                optimizer.step()
            """,
        ),
        Invalid(
            """
            import lightning as L
            from lightning.fabric import Fabric

            trainer = L.Trainer(accelerator="gpu", devices=2, precision=16)  # TD304
            fabric = Fabric(precision="bf16")  # TD304
            """,
            fixed="""
            import lightning as L
            from lightning.fabric import Fabric

            trainer = L.Trainer(accelerator="gpu", devices=2, precision="16-mixed")  # TD304
            fabric = Fabric(precision="bf16-mixed")  # TD304
            """,
        ),
        Invalid(
            """
            import torch

            scaler = torch.cuda.amp.GradScaler()  # TD304
            with torch.cuda.amp.autocast():  # TD304
                loss = model(x).mean()
            """,
            fixed="""
            import torch

            scaler = torch.amp.GradScaler("cuda")  # TD304
            with torch.autocast("cuda"):  # TD304
                loss = model(x).mean()
            """,
        ),
        Invalid(
            """
            import torch
            from torch.cuda.amp import GradScaler, autocast as amp_autocast

            scaler = GradScaler(2.0**14, enabled=use_amp)  # TD304
            with amp_autocast(use_amp, torch.float16):  # TD304
                loss = model(x).mean()
            """,
            fixed="""
            import torch
            from torch.cuda.amp import GradScaler, autocast as amp_autocast

            scaler = torch.amp.GradScaler("cuda", 2.0**14, enabled=use_amp)  # TD304
            with torch.autocast("cuda", enabled=use_amp, dtype=torch.float16):  # TD304
                loss = model(x).mean()
            """,
        ),
        Invalid(
            """
            from torch.cuda.amp import autocast

            class Net:
                @autocast()  # TD304
                def forward(self, x):
                    return self.body(x)
            """,
            fixed=None,  # `torch` is not imported: no safe rewrite
        ),
        Invalid(
            """
            import torch as th
            import torch.cpu.amp as cpu_amp

            with cpu_amp.autocast(dtype=th.bfloat16, **extra):  # TD304
                out = model(x)
            """,
            fixed="""
            import torch as th
            import torch.cpu.amp as cpu_amp

            with th.autocast("cpu", dtype=th.bfloat16, **extra):  # TD304
                out = model(x)
            """,
        ),
        Invalid(
            """
            import torch

            def make_scaler(args):
                return torch.cuda.amp.GradScaler(  # TD304
                    init_scale=args.init_scale,
                    enabled=args.fp16,
                )
            """,
            fixed="""
            import torch

            def make_scaler(args):
                return torch.amp.GradScaler(  # TD304
                    "cuda", init_scale=args.init_scale,
                    enabled=args.fp16,
                )
            """,
        ),
    )

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        from traindoctor.facts.training.context import inference_only

        if inference_only(ctx):
            return  # an inference or evaluation script of a trained model: nothing trains here
        yield from self._check_frameworks(ctx)
        yield from self._check_file(ctx)
        yield from self._check_project(ctx)

    def _check_project(self, ctx: FileContext) -> Iterator[Finding]:
        """A project function or class this file calls (``engine.train_one_epoch``,
        ``misc.NativeScaler()``) uses the deprecated API in its own module: report the call here
        and cite the use there. Each definition once, at its first call."""
        from traindoctor.facts.data.static import drives_training
        from traindoctor.facts.training.context import inference_only

        view = ctx.project
        if view is None or not view.imports_project or not drives_training(ctx):
            return
        done: set[tuple[str, str]] = set()
        for call, resolved in view.calls():
            facts = resolved.function or resolved.cls
            key = (resolved.path, resolved.name)
            if facts is None or key in done or inference_only(ctx, call):
                continue
            used = sorted((q for q in facts.calls if q in _DEPRECATED), key=lambda q: (facts.calls[q].line, q))
            used = [q for q in used if not ctx.settings.torch_below(_DEPRECATED[q][2])]
            if not used or any(q in _MODERN for q in facts.calls):
                # calling the new API too: a compatibility shim whose old call is the fallback
                continue
            done.add(key)
            qn = used[0]
            replacement, device, _ = _DEPRECATED[qn]
            old = "torch." + ("cuda" if device == "cuda" else "cpu") + ".amp." + replacement.rsplit(".", 1)[-1]
            new = f'torch.{replacement}("{device}", ...)'
            yield ctx.report(
                self,
                call,
                f"`{resolved.name}` (defined in another module) calls the deprecated `{old}(...)`; "
                f"use `{new}` there instead.",
                help=f"Use `{new}`",
                end_node=call.func,
                related=view.related(facts.calls[qn], f"`{old}(...)` is called here"),
            )

    def _check_file(self, ctx: FileContext) -> Iterator[Finding]:
        from traindoctor.facts.amp.static import pos
        from traindoctor.facts.training.context import inference_only

        names = ctx.called_names
        wanted = [q for q in sorted(_DEPRECATED) if q in names]
        if not wanted:
            return
        calls = sorted((c for q in wanted for c in ctx.calls_to(q)), key=pos)
        for call in calls:
            qn = ctx.qualname(call.func) or ""
            replacement, device, since = _DEPRECATED[qn]
            if ctx.settings.torch_below(since) or _version_gated(ctx, call) or inference_only(ctx, call):
                continue  # (inference code, evaluation of a trained model: not training)
            old = "torch." + ("cuda" if device == "cuda" else "cpu") + ".amp." + replacement.rsplit(".", 1)[-1]
            new = f'torch.{replacement}("{device}", ...)'
            yield ctx.report(
                self,
                call,
                f"`{old}(...)` is deprecated; use `{new}` instead.",
                fix=self._fix(ctx, call, qn),
                help=f"Use `{new}`",
                end_node=call.func,
            )

    def _check_frameworks(self, ctx: FileContext) -> Iterator[Finding]:
        """NVIDIA apex AMP calls, and Lightning's legacy ``precision=16`` / ``"bf16"`` spellings."""
        from traindoctor.facts.frameworks.static import (
            FABRICS,
            LIGHTNING_PRECISION_ALIASES,
            apex_amp_calls,
            fabrics,
            lightning_major,
            lightning_trainers,
        )
        from traindoctor.facts.training.context import inference_only

        found: list[Finding] = []
        for qn, call in apex_amp_calls(ctx):
            if inference_only(ctx, call):
                continue
            short = "amp." + qn.rsplit(".", 1)[-1]
            found.append(
                ctx.report(
                    self,
                    call,
                    f"NVIDIA apex `{short}(...)` is deprecated (apex points to `torch.amp`); use "
                    '`torch.autocast("cuda", ...)` with `torch.amp.GradScaler("cuda")` instead.',
                    help="Migrate from apex.amp to torch.amp",
                    end_node=call.func,
                )
            )
        legacy = [*lightning_trainers(ctx), *fabrics(ctx)]
        if legacy and lightning_major(ctx) == 1:
            legacy = []  # Lightning 1.x has no "16-mixed": its precision=16 is the right spelling
        for call in legacy:
            node = ctx.arg(call, "precision", qualname="")
            if not isinstance(node, ast.expr):
                continue
            value = ctx.value(node)
            if isinstance(value, bool) or value not in LIGHTNING_PRECISION_ALIASES:
                continue
            new = LIGHTNING_PRECISION_ALIASES[value]
            owner = "Fabric" if ctx.qualname(call.func) in FABRICS else "Trainer"
            fix = None
            if isinstance(node, ast.Constant):
                fix = ctx.fix_replace(node, f'"{new}"', f'Use `precision="{new}"`')
            found.append(
                ctx.report(
                    self,
                    node,
                    f"`{owner}(precision={ctx.segment(node)})` is a legacy alias that Lightning warns "
                    f'about; write `precision="{new}"`.',
                    fix=fix,
                    help=f'Use `precision="{new}"`',
                )
            )
        found.sort(key=_start)
        yield from found

    def _fix(self, ctx: FileContext, call: ast.Call, qn: str) -> Fix | None:
        from traindoctor.facts.amp.static import AUTOCAST_SIGNATURES, pos

        replacement, device, _ = _DEPRECATED[qn]
        torch_name = _torch_module_name(ctx, call)
        if torch_name is None or not _callee_is_imported(ctx, call.func):
            return None
        if any(isinstance(a, ast.Starred) for a in call.args):
            return None
        edits = [Edit(f"{torch_name}.{replacement}", ctx.location(call.func), ctx.end_location(call.func))]
        lead = f'"{device}"'
        if replacement == "autocast":
            signature = AUTOCAST_SIGNATURES[qn]
            if len(call.args) > len(signature):
                return None
            # Positional args move to keywords: the new autocast's positional order differs.
            for i, arg in enumerate(call.args):
                prefix = f"{signature[i]}="
                if i == 0:
                    prefix = f"{lead}, {prefix}"
                at = ctx.location(arg)
                edits.append(Edit(prefix, at, at))
        first = min([*call.args, *call.keywords], key=pos, default=None)
        if first is None:
            end = ctx.end_location(call)
            if ctx.line_text(end.row)[end.column - 2 : end.column - 1] != ")":
                return None
            at = Location(end.row, end.column - 1)
            edits.append(Edit(lead, at, at))
        elif not (replacement == "autocast" and call.args):
            at = ctx.location(first)
            edits.append(Edit(f"{lead}, ", at, at))
        text = f'{torch_name}.{replacement}("{device}", ...)'
        return Fix(f"Replace with `{text}`", tuple(edits))


_MODERN = frozenset({"torch.autocast", "torch.amp.GradScaler", "torch.GradScaler"})


def _version_gated(ctx: FileContext, call: ast.Call) -> bool:
    """Whether ``call`` is the old-torch fallback of a branch whose other side uses the new API.

    ``torch.amp.GradScaler("cuda") if TORCH_2_4 else torch.cuda.amp.GradScaler()`` already
    prefers the new API wherever it exists.
    """
    child: ast.AST = call
    for anc in ctx.ancestors(call):
        if isinstance(anc, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            return False
        other: list[ast.AST] = []
        if isinstance(anc, ast.IfExp) and child is not anc.test:
            other = [anc.orelse if child is anc.body else anc.body]
        elif isinstance(anc, ast.If) and child is not anc.test:
            other = list(anc.orelse if child in anc.body else anc.body)
        for branch in other:
            for node in ast.walk(branch):
                if isinstance(node, ast.Call) and ctx.qualname(node.func) in _MODERN:
                    return True
        child = anc
    return False


def _torch_module_name(ctx: FileContext, call: ast.Call) -> str | None:
    """The name the module ``torch`` is bound to at module level before ``call`` runs."""
    found: list[str] = []
    for node in ctx.of(ast.Import):
        if ctx.scope_of(node) is not ctx.tree:
            continue
        if ctx.function_of(call) is None and node.lineno >= call.lineno:
            continue
        for alias in node.names:
            if alias.name == "torch" and alias.asname:
                found.append(alias.asname)
            elif alias.asname is None and alias.name.split(".", 1)[0] == "torch":
                found.append("torch")
    if "torch" in found:
        return "torch"
    return found[0] if found else None


def _callee_is_imported(ctx: FileContext, func: ast.expr) -> bool:
    """Whether the callee's base name comes from an import (not a local alias assignment)."""
    while isinstance(func, ast.Attribute):
        func = func.value
    if not isinstance(func, ast.Name):
        return False
    for node in ctx.of(ast.Import, ast.ImportFrom):
        for alias in node.names:
            local = alias.asname or alias.name.split(".", 1)[0]
            if local == func.id:
                return True
    return False
