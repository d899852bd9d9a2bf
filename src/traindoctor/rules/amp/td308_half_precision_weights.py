"""TD308 half-precision-weights: the model itself is cast to float16 and then trained."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.names import dotted, receiver
from traindoctor.static.vocab import DTYPE_NAMES, FLOAT16

if TYPE_CHECKING:  # pragma: no cover
    from torch.optim import Optimizer

    from traindoctor.facts.amp.static import Backward
    from traindoctor.static.context import FileContext

_FP16_NAMES = frozenset(q for q, d in DTYPE_NAMES.items() if d == FLOAT16)
_HALF_TENSOR_TYPES = frozenset({"torch.HalfTensor", "torch.cuda.HalfTensor"})
_OPTIMIZER_PREFIXES = ("torch.optim.", "bitsandbytes.optim.", "apex.optimizers.", "timm.optim.")


class HalfPrecisionWeights(Rule):
    code = "TD308"
    name = "half-precision-weights"
    severity = Severity.WARNING
    summary = (
        "The model's weights are cast to float16 and then trained; keep float32 weights and "
        "use `torch.autocast` (with a GradScaler for float16) or bfloat16 autocast."
    )
    gpu_only = False
    static = True
    triggers = ("half", "float16", "Half")
    runtime = True
    fixable = "never"

    what_it_does = """
        Finds a module cast to float16 (`model.half()`, `model.to(torch.float16)`,
        `model.to(dtype=torch.half)`, `model.to(device, torch.float16)`) that is then trained
        where it is cast: an optimizer is built from its parameters, or, when no optimizer is
        built there, a `backward()` is called. "Where" is the function that casts it (the whole
        file for a cast at module level), so an evaluation helper that casts a model is not
        reported. The receiver must be a module: a name bound to a `torch.nn` layer, a
        torchvision/timm/transformers model or a class in the file that subclasses
        `nn.Module`, or one whose `.parameters()` the file reads. Casting input tensors,
        inference-only scripts, a cast after training (an export), and frozen models given to
        no optimizer are not reported. Neither is the classic mixed-precision recipe: an fp16
        optimizer wrapper that keeps float32 master weights and scales the loss (apex's
        `FP16_Optimizer`, fairseq's `FP16Optimizer`, a project's copy of one), nor a round trip
        that casts the model back to float32 before it trains (`model.half().float()`, or a
        `model.float()` after a half-precision load).
    """
    why_bad = """
        float16 has 10 mantissa bits: near 1.0 its spacing is about 1e-3. An update of
        `lr * grad` smaller than half of that spacing rounds away, so with typical learning
        rates (1e-4 and below) most weights simply stop changing, and there is no loss scaling
        either, so small gradients underflow to zero. Optimizer states (Adam's second moment)
        also overflow or underflow in float16. Mixed precision keeps float32 master weights
        and only runs the maths in reduced precision: that is what `torch.autocast` does.
    """
    example = """
        model = Net().cuda().half()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        for x, y in loader:
            loss = criterion(model(x.cuda().half()), y.cuda())
            loss.backward()
            optimizer.step()
    """
    use_instead = """
        model = Net().cuda()  # float32 weights
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        scaler = torch.amp.GradScaler("cuda")
        for x, y in loader:
            with torch.autocast("cuda", dtype=torch.float16):
                loss = criterion(model(x.cuda()), y.cuda())
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()

        # or let traindoctor.recipes pick the dtype for this GPU (bf16 where supported, else fp16
        # with an enabled scaler):
        from traindoctor.recipes import autocast_settings
        amp = autocast_settings("cuda")
        with amp.autocast():
            loss = criterion(model(x), y)
        amp.scaler.scale(loss).backward()
        amp.scaler.step(optimizer)
        amp.scaler.update()
    """
    options = """
    No thresholds. At run time, each optimizer's parameters are checked at its first step;
    evidence: how many are float16, and up to 10 names.
    """
    references = (
        "https://pytorch.org/docs/stable/amp.html",
        "https://arxiv.org/abs/1710.03740",
        "https://docs.nvidia.com/deeplearning/performance/mixed-precision-training/index.html",
    )

    valid = (
        Valid(
            """
            import torch
            from apex.fp16_utils import FP16_Optimizer

            # float16 weights with float32 master copies and loss scaling: the classic recipe
            model = Net().cuda().half()
            optimizer = FP16_Optimizer(torch.optim.SGD(model.parameters(), lr=0.1), dynamic_loss_scale=True)
            for x, y in loader:
                loss = criterion(model(x.cuda().half()), y.cuda())
                optimizer.backward(loss)
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch

            # a round trip: the weights train in float32
            model = Net().cuda().half().float()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                criterion(model(x), y).backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch
            import torchvision

            # Inference only: no optimizer, no backward.
            model = torchvision.models.resnet50(weights="DEFAULT").cuda().half().eval()
            with torch.inference_mode():
                preds = model(images.cuda().half())
            """
        ),
        Valid(
            """
            import torch

            model = Net().cuda()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                x = x.half()            # a tensor, not the model
                inputs = y.to("cuda", torch.float16)
                loss = criterion(model(x.float()), inputs)
                loss.backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch

            teacher = Teacher().cuda().half()
            teacher.requires_grad_(False)
            student = Student().cuda()
            optimizer = torch.optim.AdamW(student.parameters(), lr=1e-4)
            for x, y in loader:
                with torch.no_grad():
                    target = teacher(x.half())
                loss = distill(student(x), target)
                loss.backward()
                optimizer.step()
            """
        ),
        Valid(
            """
            import torch

            model = Net()
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            model.to(torch.bfloat16)   # not float16 (and after training: an export)
            torch.save(model.state_dict(), "model_bf16.pt")
            """
        ),
    )

    invalid = (
        Invalid(
            """
            import torch
            import torch.nn as nn

            model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()
            model = model.half()  # TD308
            model.load_state_dict(torch.load("half.pt"))
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
            for x, y in loader:
                nn.functional.cross_entropy(model(x), y).backward()
                optimizer.step()
            model.float()  # cast back only after training
            """
        ),
        Invalid(
            """
            import torch
            import torch.nn as nn

            model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
            model.half()  # TD308
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            for x, y in loader:
                loss = nn.functional.cross_entropy(model(x.half()), y)
                loss.backward()
                optimizer.step()
            """
        ),
        Invalid(
            """
            import torch
            from torch import nn

            class Net(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.fc = nn.Linear(10, 1)

            net = Net().to("cuda", torch.float16)  # TD308
            opt = torch.optim.Adam(net.parameters())
            """
        ),
        Invalid(
            """
            import torch as th
            from torch.optim import AdamW

            half = th.half

            def build(model, lr):
                model = model.to(dtype=half)  # TD308
                params = [p for p in model.parameters() if p.requires_grad]
                return AdamW(params, lr=lr)
            """
        ),
        Invalid(
            """
            from transformers import AutoModelForCausalLM
            import torch

            model = AutoModelForCausalLM.from_pretrained("gpt2")
            model.to(torch.device("cuda"), torch.float16)  # TD308
            for batch in loader:
                loss = model(**batch).loss
                loss.backward()
                optim.step()
            """
        ),
    )

    def check(self, ctx: FileContext) -> Iterator[Finding]:
        # Following names to their values needs the (costly) scope tables: only when some name
        # in the file is bound to a float16 dtype at all.
        from traindoctor.facts.amp.static import ModuleIndex, amp_facts, pos

        follow = any(ctx.qualname(a.value) in _FP16_NAMES for a in ctx.of(ast.Assign))
        casts = [c for c in ctx.method_calls("half") if not c.args and not c.keywords]
        casts += [c for c in ctx.method_calls("to") if self._to_float16(ctx, c, follow)]
        casts += [c for c in ctx.method_calls("type") if self._to_float16(ctx, c, follow)]
        if not casts:
            return
        casts.sort(key=pos)
        modules = ModuleIndex(ctx)
        optimizers = self._optimizer_calls(ctx)
        if any(_master_weights(ctx, o) for o in optimizers) or any(
            _master_weights(ctx, c) for c in ctx.of(ast.Call) if _wrapper_name(c)
        ):
            return  # an fp16 optimizer wrapper keeps float32 master weights and scales the loss
        facts = amp_facts(ctx)
        for cast in casts:
            model = receiver(cast)
            if not modules.is_module(model):
                continue
            if _cast_back(ctx, cast):
                continue  # ``model.half().float()``: a round trip, the weights train in float32
            names = self._names_of(ctx, cast, model)
            if not names or self._frozen(ctx, names):
                continue
            if not self._trained(ctx, cast, names, optimizers, facts.backwards):
                continue
            if _recast_before_training(ctx, cast, names, optimizers, facts.backwards):
                continue
            yield ctx.report(
                self,
                cast,
                "The model's weights are cast to float16 and then trained, so small updates "
                "round away; keep float32 weights and use `torch.autocast` (with a GradScaler) "
                "or bfloat16 autocast.",
                help="Keep float32 weights and train under `torch.autocast`",
            )

    @staticmethod
    def _to_float16(ctx: FileContext, call: ast.Call, follow: bool) -> bool:
        from traindoctor.facts.amp.static import amp_facts

        facts = amp_facts(ctx)
        args = [*call.args, *(kw.value for kw in call.keywords if kw.arg in ("dtype", None))]
        for arg in args:
            qn = ctx.qualname(arg)
            if qn in _FP16_NAMES or qn in _HALF_TENSOR_TYPES:
                return True
            if follow and isinstance(arg, ast.Name) and facts.dtype_of(arg) == FLOAT16:
                return True
        return False

    @staticmethod
    def _names_of(ctx: FileContext, cast: ast.Call, receiver: ast.expr) -> set[str]:
        """Names the cast module goes by: the receiver and what the result is assigned to."""
        from traindoctor.facts.amp.static import chain_root

        names: set[str] = set()
        root = dotted(chain_root(receiver))
        if root is not None:
            names.add(root)
        node: ast.AST = cast
        while True:  # climb the rest of a method chain: ``model.half().eval()``
            parent = ctx.parent(node)
            grand = ctx.parent(parent) if parent is not None else None
            if (
                isinstance(parent, ast.Attribute)
                and parent.value is node
                and isinstance(grand, ast.Call)
                and grand.func is parent
            ):
                node = grand
                continue
            break
        if isinstance(parent, ast.Assign) and parent.value is node:
            for target in parent.targets:
                if (text := dotted(target)) is not None:
                    names.add(text)
        return names

    @staticmethod
    def _frozen(ctx: FileContext, names: set[str]) -> bool:
        for call in ctx.method_calls("requires_grad_"):
            name = dotted(receiver(call))
            if name is not None and name in names and call.args:
                if ctx.value(call.args[0]) is False:
                    return True
        return False

    @staticmethod
    def _optimizer_calls(ctx: FileContext) -> list[ast.Call]:
        out = []
        for qn, call in ctx.calls_to_prefix(""):
            if not qn.startswith(_OPTIMIZER_PREFIXES) or ".lr_scheduler." in qn or "swa_utils" in qn:
                continue
            last = qn.rsplit(".", 1)[-1]
            if last[:1].isupper() or last.startswith("create_optimizer"):
                out.append(call)
        return out

    @staticmethod
    def _trained(
        ctx: FileContext, cast: ast.Call, names: set[str], optimizers: list[ast.Call], backwards: list[Backward]
    ) -> bool:
        """Whether the cast model is trained where it is cast.

        A cast inside a function is judged by that function (a library's evaluation helper
        that casts a model is not training it); a cast at module level by the whole file.
        """
        from traindoctor.facts.amp.static import mentions

        scope = ctx.scope_of(cast)
        if scope is not ctx.tree:
            optimizers = [o for o in optimizers if ctx.scope_of(o) is scope]
            backwards = [b for b in backwards if ctx.scope_of(b.call) is scope]
        if optimizers:
            for opt in optimizers:
                read: set[str] = set()
                for arg in [*opt.args, *(kw.value for kw in opt.keywords)]:
                    exprs = [arg]
                    for node in ast.walk(arg):  # one hop: ``params = [... model.parameters() ...]``
                        if isinstance(node, ast.Name):
                            bound = ctx.binding(node)
                            if bound is not None:
                                exprs.append(bound)
                    if any(_copies(e) for e in exprs):
                        continue  # float32 master copies of the weights: the classic fp16 recipe
                    for e in exprs:
                        read |= mentions(e)
                if read & names:
                    return _not_only_before(ctx, cast, [opt, *(b.call for b in backwards)])
            return False
        if not backwards:
            return False
        if scope is not ctx.tree and not _updates_weights(ctx, scope):
            return False  # gradients computed (e.g. a dtype check in a test) but never applied
        return _not_only_before(ctx, cast, [b.call for b in backwards])


#: Optimizer wrappers that keep float32 master copies of float16 weights and scale the loss
#: (apex's ``FP16_Optimizer``, fairseq's ``FP16Optimizer``, Megatron-style copies in a project):
#: with one of them the float16 model is the classic mixed-precision recipe, not this mistake.
_MASTER_WRAPPERS = ("FP16_Optimizer", "FP16Optimizer", "Fp16Optimizer")
_FLOAT32_CASTS = frozenset({"float", "double"})
_FP32_NAMES = frozenset({"torch.float32", "torch.float", "torch.float64", "torch.double"})


def _wrapper_name(call: ast.Call) -> bool:
    leaf = (dotted(call.func) or "").rsplit(".", 1)[-1]
    return leaf.endswith(_MASTER_WRAPPERS) and not leaf.startswith("MemoryEfficient")


def _master_weights(ctx: FileContext, call: ast.Call) -> bool:
    """Whether ``call`` builds a master-weights fp16 optimizer wrapper (by its class name)."""
    if not _wrapper_name(call):
        return False
    qn = ctx.qualname(call.func) or dotted(call.func) or ""
    return not qn.startswith("torch.")


def _to_float32(ctx: FileContext, call: ast.AST) -> bool:
    """``x.float()``, ``x.double()``, ``x.to(torch.float32)``, ``x.type(torch.float32)``."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        return False
    attr = call.func.attr
    if attr in _FLOAT32_CASTS:
        return not call.args and not call.keywords
    if attr in ("to", "type"):
        args = [*call.args, *(kw.value for kw in call.keywords if kw.arg in ("dtype", None))]
        return any(ctx.qualname(a) in _FP32_NAMES for a in args)
    return False


def _cast_back(ctx: FileContext, cast: ast.Call) -> bool:
    """Whether the method chain goes on to cast the result back to float32 (``.half().float()``)."""
    node: ast.AST = cast
    while True:
        parent = ctx.parent(node)
        grand = ctx.parent(parent) if parent is not None else None
        if not (
            isinstance(parent, ast.Attribute)
            and parent.value is node
            and isinstance(grand, ast.Call)
            and grand.func is parent
        ):
            return False
        if _to_float32(ctx, grand):
            return True
        node = grand


def _recast_before_training(
    ctx: FileContext, cast: ast.Call, names: set[str], optimizers: list[ast.Call], backwards: list[Backward]
) -> bool:
    """Whether the same function casts the model back to float32 after ``cast`` and before it
    first trains it there (``model.half(); load(...); model.float()``): a round trip."""
    from traindoctor.facts.amp.static import chain_root, pos

    scope = ctx.scope_of(cast)
    training = [
        c for c in [*optimizers, *(b.call for b in backwards)] if ctx.scope_of(c) is scope and pos(c) > pos(cast)
    ]
    first = min((pos(c) for c in training), default=None)
    for attr in ("float", "double", "to", "type"):
        for call in ctx.method_calls(attr):
            if ctx.scope_of(call) is not scope or pos(call) <= pos(cast) or (first is not None and pos(call) > first):
                continue
            root = dotted(chain_root(receiver(call)))
            if root in names and _to_float32(ctx, call):
                return True
    return False


def _updates_weights(ctx: FileContext, scope: ast.AST) -> bool:
    """Whether a function applies gradients: an ``x.step(...)`` (optimizer or scaler) or an
    in-place ``add_``/``sub_`` (a hand-written SGD update) in its body."""
    for attr in ("step", "add_", "sub_"):
        if any(ctx.scope_of(c) is scope for c in ctx.method_calls(attr)):
            return True
    return False


def _copies(expr: ast.AST) -> bool:
    """Whether ``expr`` makes copies of parameters (``p.detach().clone().float()``)."""
    return any(
        isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr in ("float", "clone", "detach", "deepcopy")
        for n in ast.walk(expr)
    )


def _not_only_before(ctx: FileContext, cast: ast.Call, training: list[ast.Call]) -> bool:
    """False when all training happens earlier in the same function (a cast for export)."""
    from traindoctor.facts.amp.static import pos

    scope = ctx.scope_of(cast)
    return not all(ctx.scope_of(t) is scope and pos(t) < pos(cast) for t in training)


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor  # noqa: E402


class HalfPrecisionWeightsMonitor(Monitor):
    """The optimizer steps float16 parameters (the model itself was cast to half)."""

    rule = HalfPrecisionWeights

    def on_optimizer_found(self, optimizer: Optimizer) -> None:
        from traindoctor.facts.optim.runtime import half_params

        half, total, names = half_params(optimizer, self.session)
        if not half:
            return
        self.report(
            f"The optimizer updates {half} of {total} parameters stored in float16, where small "
            "updates round away; keep float32 weights and use `torch.autocast` (bfloat16, or "
            "float16 with a GradScaler).",
            evidence={
                "optimizer": type(optimizer).__name__,
                "float16_params": half,
                "params": total,
                "names": names,
            },
            step=self.session.step,
        )
