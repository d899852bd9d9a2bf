"""TD205 dead-no-decay-filter: a "no decay" name list whose patterns match none of the model's parameters."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import TYPE_CHECKING

from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid

if TYPE_CHECKING:  # pragma: no cover
    from torch import nn
    from torch.optim import Optimizer

    from traindoctor.static.context import FileContext

_COMPREHENSIONS = (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)


def _pattern_list(ctx: FileContext, node: ast.AST) -> ast.List | ast.Tuple | ast.Set | None:
    """The list/tuple/set literal the ``for nd in <node>`` iterates (through one name)."""
    if isinstance(node, ast.Name):
        bound = ctx.binding(node)
        node = bound if bound is not None else node
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return node
    return None


def _named_parameters_owner(ctx: FileContext, anchor: ast.AST, name: str) -> ast.expr | None:
    """``m`` when ``name`` is the name bound by ``for name, p in m.named_parameters()`` around ``anchor``."""
    for anc in ctx.ancestors(anchor):
        gens: list[tuple[ast.AST, ast.AST]] = []
        if isinstance(anc, _COMPREHENSIONS):
            gens = [(g.target, g.iter) for g in anc.generators]
        elif isinstance(anc, (ast.For, ast.AsyncFor)):
            gens = [(anc.target, anc.iter)]
        for target, it in gens:
            if (
                isinstance(target, ast.Tuple)
                and target.elts
                and isinstance(target.elts[0], ast.Name)
                and target.elts[0].id == name
                and isinstance(it, ast.Call)
                and isinstance(it.func, ast.Attribute)
                and it.func.attr == "named_parameters"
                and not it.args
                and not it.keywords
            ):
                return it.func.value
    return None


def no_decay_filters(ctx: FileContext) -> Iterable[tuple[ast.AST, list[ast.Constant], ast.expr]]:
    """(list literal, its string patterns, model expr) for each ``any(nd in n for nd in L)``."""
    for call in ctx.of(ast.Call):
        if not (isinstance(call.func, ast.Name) and call.func.id == "any" and "any" not in ctx.imports.names):
            continue
        if len(call.args) != 1 or not isinstance(call.args[0], (ast.GeneratorExp, ast.ListComp)):
            continue
        comp = call.args[0]
        if len(comp.generators) != 1 or comp.generators[0].ifs:
            continue
        gen = comp.generators[0]
        elt = comp.elt
        if not (
            isinstance(gen.target, ast.Name)
            and isinstance(elt, ast.Compare)
            and len(elt.ops) == 1
            and isinstance(elt.ops[0], ast.In)
            and isinstance(elt.left, ast.Name)
            and elt.left.id == gen.target.id
            and isinstance(elt.comparators[0], ast.Name)
        ):
            continue
        literal = _pattern_list(ctx, gen.iter)
        if literal is None:
            continue
        owner = _named_parameters_owner(ctx, call, elt.comparators[0].id)
        if owner is None:
            continue
        patterns = [e for e in literal.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
        yield literal, patterns, owner


class DeadNoDecayFilter(Rule):
    code = "TD205"
    name = "dead-no-decay-filter"
    severity = Severity.WARNING
    summary = (
        'A "no decay" name pattern matches no parameter of the model, so its normalisation '
        "parameters are still decayed; select them by module type instead."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("named_parameters",)
    fixable = "never"

    what_it_does = """
    Finds the common "no decay" filter, `any(nd in n for nd in no_decay)` over
    `model.named_parameters()`, and compares its patterns with the parameter names the model in
    the same file produces. It reports the pattern list when a pattern matches no parameter name
    and, as a result, some normalisation parameters are matched by no pattern at all: they are
    decayed although the list says otherwise. The names must be knowable from the file (an
    `nn.Sequential` of torch layers, an `nn.Module` subclass whose methods assign
    `self.<attr> = nn.<Layer>(...)`, a torchvision ResNet); for anything else (pretrained
    Hugging Face models name their norms `LayerNorm`, so `"LayerNorm.weight"` is right there)
    the rule stays silent.
    """
    why_bad = """
    Parameter names come from the attribute names the author chose, not from the layer class:
    `nn.Sequential(nn.Linear(...), nn.BatchNorm1d(...))` names its norm parameters `1.weight`
    and `1.bias`, a ResNet names them `bn1.weight`, `layer1.0.bn2.weight`. The pattern
    `"LayerNorm.weight"` copied from BERT fine-tuning scripts silently matches nothing in such
    models, the filter is dead, and the norm gains get weight decay (see TD204 for why that is
    unwanted). Nothing fails, so the mistake survives for years.
    """
    example = """
    import torch
    from torch import nn

    model = nn.Sequential(nn.Linear(784, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, 10))
    no_decay = ["bias", "BatchNorm.weight"]  # parameters are named "1.weight", not "BatchNorm.weight"
    groups = [
        {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)], "weight_decay": 0.05},
        {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
    ]
    """
    use_instead = """
    import torch
    from torch import nn
    from traindoctor.recipes import param_groups

    model = nn.Sequential(nn.Linear(784, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, 10))
    groups = param_groups(model, weight_decay=0.05)  # biases and norm layers found by module type
    """
    options = """
    Runtime: `no_decay` (a list, or a comma-separated string, e.g.
    `watch(thresholds={"no_decay": ["bias", "bn"]})`) declares the script's no-decay name
    patterns; each is checked as a substring against the parameter names of the models that ran.
    Patterns that live only inside the script are not observable at run time (the static check
    reads them); without `no_decay` the runtime reports only an explicit `weight_decay=0` group
    that holds no parameter while bias/normalisation parameters are decayed in another group.
    """
    references = (
        "https://arxiv.org/abs/1706.02677",
        "https://pytorch.org/docs/stable/generated/torch.nn.Module.html#torch.nn.Module.named_parameters",
    )

    valid = (
        Valid("""
        import torch
        from transformers import AutoModelForSequenceClassification

        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        no_decay = ["bias", "LayerNorm.weight"]  # right for BERT: its attributes are named LayerNorm
        groups = [
            {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)]},
            {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
        ]
        """),
        Valid("""
        import torch.nn as nn

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(64, 64)
                self.norm = nn.LayerNorm(64)

        model = Block()
        no_decay = ("bias", "norm.weight")
        decay = [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)]
        """),
        Valid("""
        import torch.nn as nn

        # the dead "LayerNorm.weight" pattern is harmless: there is no normalisation layer
        model = nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 2))
        no_decay = ["bias", "LayerNorm.weight"]
        decay = [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)]
        """),
        Valid("""
        import torch.nn as nn

        def groups(model):
            # model comes from the caller: its names are unknown here
            no_decay = ["bias", "bn.weight"]
            return [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)]
        """),
    )
    invalid = (
        Invalid("""
        import torch
        from torch import nn

        model = nn.Sequential(nn.Linear(784, 256), nn.BatchNorm1d(256), nn.ReLU(), nn.Linear(256, 10))
        no_decay = ["bias", "BatchNorm.weight"]  # TD205
        groups = [
            {"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)]},
            {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
        ]
        """),
        Invalid("""
        import torch.nn as tnn
        from torch.nn import Conv2d, BatchNorm2d

        class Net(tnn.Module):
            def __init__(self, num_classes: int = 10):
                super().__init__()
                self.num_classes = num_classes
                self.conv1 = Conv2d(3, 32, 3, bias=False)
                self.bn1 = BatchNorm2d(32)
                self.head = tnn.Linear(32, num_classes)

            def param_groups(self):
                skip = ("bias", "bn.weight", "LayerNorm.weight")  # TD205
                decay, no_decay = [], []
                for name, p in self.named_parameters():
                    if any(s in name for s in skip):
                        no_decay.append(p)
                    else:
                        decay.append(p)
                return decay, no_decay
        """),
        Invalid("""
        import torch
        import torchvision
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(torchvision.models.resnet50().cuda())
        params = [
            {"params": [p for n, p in model.named_parameters()
                        if not any(nd in n for nd in ["bias", "BatchNorm2d.weight"])], "weight_decay": 1e-4},  # TD205
        ]
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.models.static import ModelInfo, model_of, self_model

        done: set[int] = set()
        for literal, patterns, owner in no_decay_filters(ctx):
            if id(literal) in done or not patterns:
                continue
            done.add(id(literal))
            info: ModelInfo = (
                self_model(ctx, owner) if isinstance(owner, ast.Name) and owner.id == "self" else model_of(ctx, owner)
            )
            names = info.param_names
            if not names:
                continue
            texts = [str(p.value) for p in patterns]
            dead = [t for t in texts if not any(t in n for n in names)]
            missed = [n for n in info.norm_params() if not any(t in n for t in texts)]
            if not dead or not missed:
                continue
            shown = ", ".join(f'"{t}"' for t in dead)
            yield ctx.report(
                self,
                literal,
                f"No-decay pattern{'s' if len(dead) > 1 else ''} {shown} match{'' if len(dead) > 1 else 'es'} no "
                f"parameter of `{info.label or ctx.segment(owner)}`, whose norm parameters are named like "
                f"`{missed[0]}`; select biases and norm layers by module type "
                "(`traindoctor.recipes.param_groups`).",
                help="Select no-decay parameters by module type",
            )


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor, SessionView  # noqa: E402


class DeadNoDecayFilterMonitor(Monitor):
    """A no-decay filter that matches nothing.

    Observable in two ways: (1) the user declares the patterns (threshold ``no_decay``: a list or
    a comma-separated string, e.g. ``watch(thresholds={"no_decay": ["bias", "bn"]})``); each is
    checked, as a substring, against the real parameter names of the models that ran; (2) an
    optimizer has an explicit ``weight_decay=0`` group that holds no parameter at all while other
    groups decay bias/normalisation parameters: the filter that should have filled it matched
    nothing. A partially working filter is TD204's finding.
    """

    rule = DeadNoDecayFilter

    def __init__(self, session: SessionView) -> None:
        super().__init__(session)
        self.empty_groups: list[tuple[str, list[int], int, list[str]]] = []
        self.names: dict[str, None] = {}

    def on_model_found(self, module: nn.Module) -> None:
        # Names are read now: the model may be gone when the run ends.
        for name, _ in module.named_parameters():
            self.names.setdefault(name)

    def on_optimizer_found(self, optimizer: Optimizer) -> None:
        from traindoctor.facts.optim.runtime import audit_optimizer

        audit = audit_optimizer(optimizer, self.session)
        if audit.empty_zero_groups and audit.decayed:
            self.empty_groups.append(
                (type(optimizer).__name__, audit.empty_zero_groups, len(audit.decayed), audit.names())
            )

    def on_run_end(self) -> None:
        from traindoctor.facts.optim.runtime import declared_patterns

        patterns = declared_patterns(self.threshold("no_decay", None))
        if patterns:
            names = list(self.names)
            if names:
                dead = [p for p in patterns if not any(p in n for n in names)]
                if dead:
                    self.report(
                        f"No-decay pattern(s) {', '.join(repr(p) for p in dead)} match no parameter "
                        "name of the model; select parameters by module type and rank instead "
                        "(`traindoctor.recipes.param_groups(model, weight_decay)`).",
                        evidence={
                            "dead_patterns": dead,
                            "patterns": patterns,
                            "parameters": len(names),
                            "example_names": names[:5],
                        },
                    )
        for opt_name, groups, decayed, examples in self.empty_groups:
            self.report(
                f"{opt_name}'s weight_decay=0 param group(s) {groups} hold no parameters while "
                f"{decayed} bias/normalisation parameter(s) are decayed: the no-decay filter "
                "matched nothing; use `traindoctor.recipes.param_groups(model, weight_decay)`.",
                evidence={
                    "empty_no_decay_groups": groups,
                    "decayed_bias_norm_params": decayed,
                    "names": examples,
                },
            )
