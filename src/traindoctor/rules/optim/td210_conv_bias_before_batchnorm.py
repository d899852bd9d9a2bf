"""TD210 conv-bias-before-batchnorm: a convolution or linear layer with a bias feeds a BatchNorm directly."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.runtime.events import Monitor
from traindoctor.static.args import MISSING, find_arg

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: Layer with a bias -> (position of ``bias`` in its signature, the BatchNorm it may feed).
_BIASED: dict[str, tuple[int, str]] = {
    "Conv1d": (7, "BatchNorm1d"),
    "Conv2d": (7, "BatchNorm2d"),
    "Conv3d": (7, "BatchNorm3d"),
    "Linear": (2, "BatchNorm1d"),
}
_PARAMS = ("in", "out", "kernel_size", "stride", "padding", "dilation", "groups", "bias")
_LINEAR_PARAMS = ("in_features", "out_features", "bias")


class ConvBiasBeforeBatchnorm(Rule):
    code = "TD210"
    name = "conv-bias-before-batchnorm"
    severity = Severity.INFO
    summary = (
        "A convolution (or linear layer) with a bias feeds a BatchNorm directly: BatchNorm subtracts "
        "the mean, so the bias is dead weight; pass `bias=False`."
    )
    static = True
    runtime = True
    triggers = ("BatchNorm",)
    fixable = "sometimes"

    what_it_does = """
    Reports a `Conv1d/2d/3d` or `Linear` layer built with its default `bias=True` that feeds the
    matching BatchNorm (`BatchNorm1d/2d/3d`) directly: the two are neighbours in an
    `nn.Sequential(...)`, or a module's `forward` applies the BatchNorm straight to the layer's
    output (`self.bn(self.conv(x))`, or `x = self.conv(x)` followed by `x = self.bn(x)`). A bias
    that is computed (`bias=args.bias`) is left alone, and so are test files. This is PyTorch's
    own profiler pattern `Conv2dBiasFollowedByBatchNorm2d`.

    At run time the pairs are read from the model's `nn.Sequential` containers, and reported for
    the convolutions that ran training forwards, on the line that built the first of them (read
    back from the source: the `self.<name> = ...` of the nearest class of yours, down through
    `nn.Sequential(...)` arguments, or a script's `nn.Sequential(...)` whose children match the
    model's). When the source does not show it unambiguously the finding has no line.
    """
    why_bad = """
    BatchNorm subtracts the per-channel mean of its input, so a constant per-channel bias added
    just before it cancels out exactly (in training and, through the running mean, in evaluation);
    BatchNorm's own shift `beta` plays its role. The bias is stored, updated by the optimizer,
    decayed and checkpointed, and its gradient is computed at every step, for no effect on the
    output. It is a small waste (one vector per layer), which is why this is `info`.
    """
    example = """
    import torch.nn as nn

    block = nn.Sequential(nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU())
    """
    use_instead = """
    import torch.nn as nn

    block = nn.Sequential(nn.Conv2d(64, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128), nn.ReLU())
    """
    fix_safety = """
    The fix (`bias=False`) is unsafe: it removes the `bias` entry from the model's `state_dict`,
    so loading a checkpoint saved before the change needs `strict=False` (the bias had no effect,
    so nothing is lost).
    """
    references = (
        "https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html#disable-bias-for-convolutions-directly-followed-by-a-batch-norm",
        "https://github.com/pytorch/pytorch/blob/main/torch/profiler/_pattern_matcher.py",
    )

    valid = (
        Valid("""
        import torch.nn as nn

        block = nn.Sequential(nn.Conv2d(64, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128), nn.ReLU())
        """),
        Valid("""
        import torch.nn as nn

        # the activation sits between the convolution and the BatchNorm: the bias matters
        block = nn.Sequential(nn.Conv2d(3, 16, 3), nn.ReLU(), nn.BatchNorm2d(16))
        head = nn.Sequential(nn.Linear(16, 8), nn.LayerNorm(8))
        """),
        Valid("""
        import torch.nn as nn

        class Block(nn.Module):
            def __init__(self, cin, cout, use_bias):
                super().__init__()
                self.conv = nn.Conv2d(cin, cout, 3, bias=use_bias)
                self.bn = nn.BatchNorm2d(cout)

            def forward(self, x):
                return self.bn(self.conv(x))
        """),
        Valid("""
        import torch.nn as nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3)
                self.bn = nn.BatchNorm2d(8)

            def forward(self, x):
                x = self.conv(x)
                x = x + 1
                return self.bn(x.relu())
        """),
    )
    invalid = (
        Invalid(
            """
            import torch.nn as nn

            block = nn.Sequential(
                nn.Conv2d(64, 128, 3, padding=1),  # TD210
                nn.BatchNorm2d(128),
                nn.ReLU(),
            )
            """,
            unsafe_fixed="""
            import torch.nn as nn

            block = nn.Sequential(
                nn.Conv2d(64, 128, 3, padding=1, bias=False),  # TD210
                nn.BatchNorm2d(128),
                nn.ReLU(),
            )
            """,
        ),
        Invalid("""
        from torch import nn

        class Block(nn.Module):
            def __init__(self, cin, cout):
                super().__init__()
                self.conv = nn.Conv2d(cin, cout, 3, 1, 1, 1, 1, True)  # TD210
                self.bn = nn.BatchNorm2d(cout)
                self.fc = nn.Linear(cout, 10)  # TD210
                self.bn_fc = nn.BatchNorm1d(10)

            def forward(self, x):
                x = self.conv(x)
                x = self.bn(x)
                return self.bn_fc(self.fc(x.mean((2, 3))))
        """),
        Invalid("""
        import torch.nn as nn

        head = nn.Sequential(nn.Linear(128, 64), nn.BatchNorm1d(64), nn.ReLU())  # TD210
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import is_test_file

        if is_test_file(ctx.filename):
            return
        seen: set[ast.Call] = set()
        for layer in (*_sequential_pairs(ctx), *_forward_pairs(ctx)):
            if layer in seen:
                continue
            seen.add(layer)
            kind = _nn_name(ctx, layer.func) or "layer"
            fix = ctx.fix_add_keyword(layer, "bias=False", "Pass `bias=False`", applicability="unsafe")
            yield ctx.report(
                self,
                layer,
                f"This `{kind}` has a bias and feeds a BatchNorm directly, which subtracts the mean: "
                "the bias has no effect; pass `bias=False`.",
                fix=fix,
                help="Pass `bias=False`",
            )


def _nn_name(ctx: FileContext, func: ast.AST) -> str | None:
    from traindoctor.facts.models.static import torch_nn_name

    return torch_nn_name(ctx, func)


def _biased_layer(ctx: FileContext, node: ast.AST) -> str | None:
    """The BatchNorm a ``Conv*d``/``Linear`` call with a literal (or default) bias may feed."""
    if not isinstance(node, ast.Call):
        return None
    name = _nn_name(ctx, node.func)
    if name not in _BIASED:
        return None
    signature = _LINEAR_PARAMS if name == "Linear" else _PARAMS
    bias = find_arg(node, "bias", signature)
    if bias is not MISSING and not (isinstance(bias, ast.Constant) and bias.value is True):
        return None
    return _BIASED[name][1]


def _is_batchnorm(ctx: FileContext, node: ast.AST, wanted: str) -> bool:
    return isinstance(node, ast.Call) and _nn_name(ctx, node.func) == wanted


def _sequential_pairs(ctx: FileContext) -> Iterator[ast.Call]:
    for call in ctx.calls_to("torch.nn.Sequential"):
        for a, b in zip(call.args, call.args[1:]):
            bn = _biased_layer(ctx, a)
            if bn is not None and _is_batchnorm(ctx, b, bn):
                assert isinstance(a, ast.Call)
                yield a


def _self_layers(cls: ast.ClassDef) -> dict[str, ast.expr | None]:
    """``self.<attr>`` -> its value when assigned exactly once in the class (else None)."""
    out: dict[str, ast.expr | None] = {}
    for node in ast.walk(cls):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                out[t.attr] = None if t.attr in out else node.value
    return out


def _self_call(node: ast.AST) -> tuple[str, ast.expr] | None:
    """``self.<attr>(x)`` -> (attr, x)."""
    if (
        isinstance(node, ast.Call)
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    ):
        return node.func.attr, node.args[0]
    return None


def _classes_holding_batchnorm(ctx: FileContext) -> set[ast.AST]:
    """Every class (nested ones' outer classes too) whose body builds a BatchNorm layer: the only
    classes whose ``forward`` can feed one (a large module's other classes are not walked)."""
    wanted = {bn for _, bn in _BIASED.values()}
    out: set[ast.AST] = set()
    for _, call in ctx.calls_to_prefix("torch.nn."):
        if _nn_name(ctx, call.func) in wanted:
            out.update(a for a in ctx.ancestors(call) if isinstance(a, ast.ClassDef))
    return out


def _forward_pairs(ctx: FileContext) -> Iterator[ast.Call]:
    holding = _classes_holding_batchnorm(ctx)
    for cls in ctx.of(ast.ClassDef):
        if cls not in holding:
            continue
        forward = next(
            (s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "forward"),
            None,
        )
        if forward is None:
            continue
        layers = _self_layers(cls)

        def pair(outer: str, inner: str, _layers: dict[str, ast.expr | None] = layers) -> ast.Call | None:
            conv = _layers.get(inner)
            bn_call = _layers.get(outer)
            wanted = _biased_layer(ctx, conv) if conv is not None else None
            if wanted is not None and bn_call is not None and _is_batchnorm(ctx, bn_call, wanted):
                assert isinstance(conv, ast.Call)
                return conv
            return None

        for node in ast.walk(forward):
            outer = _self_call(node)
            if outer is not None:
                inner = _self_call(outer[1])
                if inner is not None:
                    found = pair(outer[0], inner[0])
                    if found is not None:
                        yield found
        for body in _bodies(forward):
            for first, second in itertools.pairwise(body):
                found = _consecutive(first, second, pair)
                if found is not None:
                    yield found


def _bodies(fn: ast.FunctionDef) -> Iterator[list[ast.stmt]]:
    for node in ast.walk(fn):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                yield body


def _consecutive(first: ast.stmt, second: ast.stmt, pair: Any) -> ast.Call | None:
    """``h = self.conv(x)`` then ``h2 = self.bn(h)``."""
    if not (isinstance(first, ast.Assign) and len(first.targets) == 1 and isinstance(first.targets[0], ast.Name)):
        return None
    inner = _self_call(first.value)
    if inner is None:
        return None
    value = second.value if isinstance(second, (ast.Assign, ast.Return)) else None
    outer = _self_call(value) if value is not None else None
    if outer is None or not (isinstance(outer[1], ast.Name) and outer[1].id == first.targets[0].id):
        return None
    found: ast.Call | None = pair(outer[0], inner[0])
    return found


# ---------------------------------------------------------------- runtime half
class ConvBiasBeforeBatchnormMonitor(Monitor):
    """Biased convolutions/linear layers followed by a BatchNorm in an ``nn.Sequential`` of a
    root model, among the layers that ran training forwards (the module probe's counts). The
    structure is read once per root, at the first step after the root was found (its layers
    have run a forward by then)."""

    rule = ConvBiasBeforeBatchnorm

    def __init__(self, session: Any) -> None:
        super().__init__(session)
        self._pending: list[Any] = []
        self._pairs: list[tuple[str, str, int]] = []
        self._site: Any = None
        #: user files where a root model ran its first forward: where a bare ``nn.Sequential``
        #: model was probably built (read to give the finding a line)
        self._hint_files: list[str] = []

    def on_model_found(self, module: Any) -> None:
        import weakref

        from traindoctor.runtime.live import user_site

        self._pending.append(weakref.ref(module))
        site = user_site()
        if site is not None and site[0] not in self._hint_files:
            self._hint_files.append(site[0])

    def on_step_end(self, step_record: Any) -> None:
        if not self._pending:
            return
        from traindoctor.facts.models.runtime import biased_layers_before_batchnorm

        roots = [m for m in (ref() for ref in self._pending) if m is not None]
        self._pending = []
        found = biased_layers_before_batchnorm(self.session, roots)
        if found and not self._pairs:
            # the root may be gone by the end of the run: read its first layer's line now (once)
            root, name = found[0][0], found[0][1]
            try:
                self._site = self._source_site(root, name)
            except Exception:  # fail-open: a finding without a line rather than none
                self._site = None
        self._pairs += [(a, b, n) for _r, a, b, n in found]

    def _source_site(self, root: Any, name: str) -> Any:
        """Where ``root``'s layer ``name`` was built, when the source says so unambiguously."""
        import sys

        from traindoctor.facts.models.source_sites import module_source_site

        main = getattr(sys.modules.get("__main__"), "__file__", None)
        return module_source_site(root, name, [*self._hint_files, *([main] if isinstance(main, str) else [])])

    def on_run_end(self) -> None:
        pairs = self._pairs
        if not pairs:
            return
        from traindoctor.runtime.live import site_kwargs

        names = [f"{a} -> {b}" for a, b, _n in pairs]
        self.report(
            f"{len(pairs)} layer(s) with a bias feed a BatchNorm directly ({names[0]}"
            f"{', ...' if len(names) > 1 else ''}): the bias has no effect; build them with `bias=False`.",
            evidence={
                "pairs": names[:20],
                "layers": len(pairs),
                "dead_bias_parameters": sum(n for _a, _b, n in pairs),
            },
            step=self.session.step,
            **site_kwargs(self._site),
        )
