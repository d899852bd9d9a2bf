"""TD204 weight-decay-on-bias-norm: an optimizer decays every parameter, biases and norm gains included."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from traindoctor.facts.optim import NEGLIGIBLE_WEIGHT_DECAY
from traindoctor.finding import Finding, Severity
from traindoctor.rules.base import Invalid, Rule, Valid
from traindoctor.static.args import MISSING, UNKNOWN
from traindoctor.static.names import dotted

if TYPE_CHECKING:  # pragma: no cover
    from torch.optim import Optimizer

    from traindoctor.static.context import FileContext


def whole_model_params(ctx: FileContext, node: ast.AST, depth: int = 0) -> ast.expr | None:
    """The module ``m`` when ``node`` hands the optimizer all of ``m``'s parameters, else None.

    ``m.parameters()``, ``list(m.parameters())``, ``filter(lambda p: p.requires_grad,
    m.parameters())``, ``(p for n, p in m.named_parameters())`` and
    ``[p for p in m.parameters() if p.requires_grad]`` all count; a comprehension that filters by
    name, or parameter groups built by a function, do not.
    """
    if depth > 4:
        return None
    if isinstance(node, ast.Name):
        bound = ctx.binding(node)
        return whole_model_params(ctx, bound, depth + 1) if bound is not None else None
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "parameters" and not node.args and not node.keywords:
            return func.value
        if isinstance(func, ast.Name) and func.id not in ctx.imports.names:
            if func.id in ("list", "tuple") and len(node.args) == 1 and not node.keywords:
                return whole_model_params(ctx, node.args[0], depth + 1)
            if func.id == "filter" and len(node.args) == 2 and _requires_grad_filter(node.args[0]):
                return whole_model_params(ctx, node.args[1], depth + 1)
        return None
    if isinstance(node, (ast.GeneratorExp, ast.ListComp)) and len(node.generators) == 1:
        gen = node.generators[0]
        it = gen.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Attribute) and not it.args):
            return None
        if it.func.attr == "parameters" and isinstance(gen.target, ast.Name):
            param = gen.target.id
        elif (
            it.func.attr == "named_parameters"
            and isinstance(gen.target, ast.Tuple)
            and len(gen.target.elts) == 2
            and isinstance(gen.target.elts[1], ast.Name)
        ):
            param = gen.target.elts[1].id
        else:
            return None
        if not (isinstance(node.elt, ast.Name) and node.elt.id == param):
            return None
        if all(_only_requires_grad(cond, param) for cond in gen.ifs):
            return it.func.value
    return None


def _only_requires_grad(cond: ast.AST, param: str) -> bool:
    return isinstance(cond, ast.Attribute) and cond.attr == "requires_grad" and dotted(cond.value) == param


def _requires_grad_filter(fn: ast.AST) -> bool:
    return isinstance(fn, ast.Lambda) and len(fn.args.args) == 1 and _only_requires_grad(fn.body, fn.args.args[0].arg)


def _decay_value(ctx: FileContext, node: object, default: object) -> float | None:
    """A weight decay that matters (known, at least the negligible one), else None."""
    return _significant(default if node is MISSING else ctx.value(node))


def _significant(decay: object) -> float | None:
    if decay is UNKNOWN or isinstance(decay, bool) or not isinstance(decay, (int, float)):
        return None
    return float(decay) if decay >= NEGLIGIBLE_WEIGHT_DECAY else None


def _decayed_modules(
    ctx: FileContext, params: ast.expr, node: object, default: object
) -> Iterator[tuple[ast.expr, float, bool]]:
    """(module, decay, passed explicitly) for each module all of whose parameters the optimizer
    decays: ``model.parameters()`` itself, or parameter groups each made of one whole module's
    parameters (``[{"params": model.backbone.parameters(), "lr": 1e-5}, {"params":
    model.head.parameters()}]``), a group's own ``weight_decay`` overriding the optimizer's.
    Groups that split parameters any other way (by name, by shape) are left alone."""
    model = whole_model_params(ctx, params)
    if model is not None:
        decay = _decay_value(ctx, node, default)
        if decay is not None:
            yield model, decay, isinstance(node, ast.expr)
        return
    groups = _module_groups(ctx, params)
    if groups is None:
        return
    for module, own in groups:
        decay = _decay_value(ctx, own, default) if own is not MISSING else _decay_value(ctx, node, default)
        if decay is not None:
            yield module, decay, own is not MISSING or isinstance(node, ast.expr)


def _module_groups(ctx: FileContext, params: ast.expr) -> list[tuple[ast.expr, object]] | None:
    """(module, the group's ``weight_decay`` node or MISSING) for a list of parameter-group dicts
    each holding one whole module's parameters; None for any other ``params``."""
    if isinstance(params, ast.Name):
        bound = ctx.binding(params)
        if bound is None or params.id in ctx.mutated_names:
            return None
        params = bound
    if not isinstance(params, (ast.List, ast.Tuple)) or len(params.elts) < 2:
        return None
    out: list[tuple[ast.expr, object]] = []
    for elt in params.elts:
        group = ctx.dict_literal(elt)
        if group is None or "params" not in group:
            return None
        module = whole_model_params(ctx, group["params"])
        if module is None:
            return None
        out.append((module, group.get("weight_decay", MISSING)))
    return out


def _owner(ctx: FileContext, model: ast.expr) -> str:
    """How a message names the module whose parameters are decayed."""
    if isinstance(model, ast.Name) and model.id == "self":
        cls = ctx.enclosing(model, ast.ClassDef)
        return f"`{cls.name}`" if isinstance(cls, ast.ClassDef) else "this module"
    return f"`{ctx.segment(model)}`"


class WeightDecayOnBiasNorm(Rule):
    code = "TD204"
    name = "weight-decay-on-bias-norm"
    severity = Severity.WARNING
    summary = (
        "An optimizer built from `model.parameters()` with weight decay also decays biases and "
        "normalisation gains; put those in a parameter group with `weight_decay=0`."
    )
    gpu_only = False
    static = True
    runtime = True
    triggers = ("optim", "AdamW", "weight_decay")
    fixable = "never"

    what_it_does = """
    Reports an optimizer that receives all of a model's parameters in one group
    (`model.parameters()`, `filter(lambda p: p.requires_grad, model.parameters())`, ...) with a
    nonzero `weight_decay`, passed by keyword, by position, through a `**kwargs` dict or as an
    argparse default. `torch.optim.AdamW` counts even without the argument: its default
    `weight_decay` is 0.01. `SGD`, `Adam`, the deprecated `transformers.AdamW` and the others
    default to 0 and are not reported unless they pass a nonzero value. Parameter groups built
    by a function (`traindoctor.recipes.param_groups(model, 0.05)`) or by filtering on names
    are left alone; parameter groups that are each one whole submodule's parameters
    (`[{"params": model.backbone.parameters(), "lr": 1e-5}, {"params": model.head.parameters()}]`)
    decay every parameter of each and are reported. The optimizer class may be named through a
    variable (`optimizer_cls = torch.optim.AdamW`, in branches; an opt-in branch off by default
    does not count), `getattr(torch.optim, args.optimizer)` or a dict of classes. An optimizer
    built by a helper (`build_optimizer(model, args)`) whose weight decay is what the call passes
    is reported at the call, citing the helper.

    Only what trains counts: a model frozen as a whole (`model.requires_grad_(False)`, a loop
    setting `requires_grad` to False or to a test of the name that keeps no normalisation
    parameter, PEFT's `get_peft_model`, or a project function that does either to the model it is
    handed, such as `mark_only_lora_as_trainable(model)`), or a module built from parts of a
    frozen model (`AttnProcsLayers(unet.attn_processors)`), trains its adapters or new head only
    and is not reported. A library module's `__main__` demo that never runs backward (a schedule
    plotted) is not training.

    Framework forms: Hugging Face `TrainingArguments(weight_decay=w)` with `w > 0` makes the
    Trainer's own optimizer decay every parameter except those it excludes: biases, `nn.LayerNorm`
    modules and names containing `layernorm`, `rmsnorm`, `.norm.` or `_norm`. BatchNorm and
    GroupNorm weights named like `bn1` or `norm1` are still decayed; they are reported (with
    their names) for a model the file spells out, unless the Trainer gets its own optimizer
    (`optimizers=`) or the script overrides `create_optimizer`. In a Lightning module,
    `configure_optimizers` returning an optimizer over `self.parameters()` is judged like any
    other, with `weight_decay=self.hparams.weight_decay` or `self.weight_decay` read from the
    `__init__` default (Lightning's hyperparameters; `LightningCLI` exposes them as command-line
    defaults) when nothing in the file passes another value.
    """
    why_bad = """
    Weight decay pulls weights toward zero. That regularises the scale of weight matrices and
    convolution kernels, but biases and the gains/shifts of BatchNorm, LayerNorm, GroupNorm and
    RMSNorm have no such role: decaying a norm gain fights the normalisation itself (and for
    layers followed by normalisation the decay only changes the effective learning rate).
    Large-batch ImageNet recipes (Goyal et al. 2017) and the BERT/ViT/ConvNeXt recipes all
    exclude biases and norm parameters from decay; decaying them typically costs a little
    accuracy and makes the result depend on the decay strength more than it should. The
    usual fix is two parameter groups, selected by module type rather than by parameter name.
    """
    example = """
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.LayerNorm(256), torch.nn.Linear(256, 10))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)  # decays LayerNorm too (default 0.01)
    """
    use_instead = """
    import torch
    from traindoctor.recipes import param_groups

    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.LayerNorm(256), torch.nn.Linear(256, 10))
    optimizer = torch.optim.AdamW(param_groups(model, weight_decay=0.05), lr=3e-4)
    """
    options = """
    No thresholds. A weight decay below 1e-6 is negligible (it shrinks a weight by less than 1%
    over a million steps at a learning rate of 0.01) and is not reported. At run time each optimizer's param groups are audited at its first step: a
    parameter is a bias/normalisation parameter when its owning module is a normalisation layer
    (BatchNorm, SyncBatchNorm, InstanceNorm, LayerNorm, GroupNorm, RMSNorm or a subclass), when
    its module registered it as `bias`, or when its rank is <= 1; each one in a group with
    `weight_decay > 0` is reported (count, kinds, up to 10 names). Modules come from the root
    models seen running forward; names are only printed, never used to classify.
    """
    references = (
        "https://arxiv.org/abs/1706.02677",
        "https://arxiv.org/abs/1711.05101",
        "https://arxiv.org/abs/1812.01187",
        "https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html",
    )

    valid = (
        Valid("""
        import torch
        import torchvision

        # linear evaluation: the backbone is frozen, only the new head trains
        model = torchvision.models.resnet18()
        for p in model.parameters():
            p.requires_grad = False
        model.fc = torch.nn.Linear(512, 10)
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-4, weight_decay=0.0008)
        """),
        Valid("""
        import torch

        # a negligible decay (below 1e-6): what it does to biases does not matter
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8))
        optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-5, weight_decay=1e-8, momentum=0.999)
        """),
        Valid("""
        import torch
        from torch import nn

        model = nn.Sequential(nn.Conv2d(3, 16, 3), nn.BatchNorm2d(16), nn.ReLU())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        """),
        Valid("""
        import torch
        from traindoctor.recipes import param_groups

        model = torch.nn.Linear(10, 2)
        optimizer = torch.optim.AdamW(param_groups(model, 0.05), lr=1e-3)
        """),
        Valid("""
        import torch

        def build(model, cfg):
            decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
            no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
            return torch.optim.AdamW(
                [{"params": decay, "weight_decay": cfg.wd}, {"params": no_decay, "weight_decay": 0.0}],
                lr=cfg.lr,
            )
        """),
        Valid("""
        import torch

        def make_optimizer(model, weight_decay):
            # weight decay comes from the caller: unknown here
            return torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=weight_decay)
        """),
        Valid("""
        from torch.optim import AdamW
        import torch.nn as nn

        model = nn.Linear(128, 10)
        opt = AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        """),
        Valid("""
        import torch
        import torch.nn as nn

        # no bias, no normalisation layer: nothing to exclude
        model = nn.Sequential(nn.Linear(10, 10, bias=False), nn.ReLU(), nn.Linear(10, 1, bias=False))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        """),
        Valid("""
        import torch.nn as nn
        from transformers import Trainer, TrainingArguments

        # the Trainer excludes biases and LayerNorm weights itself
        model = nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64), nn.Linear(64, 2))
        args = TrainingArguments(output_dir="out", weight_decay=0.01)
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """),
        Valid("""
        import torch
        from peft import LoraConfig, get_peft_model

        # only the LoRA matrices train: the base model is frozen by PEFT
        model = get_peft_model(base_model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
        """),
        Valid("""
        import lightning as L
        import torch

        class Model(L.LightningModule):
            def __init__(self, weight_decay: float = 1e-4):
                super().__init__()
                self.weight_decay = weight_decay

            def configure_optimizers(self):
                return torch.optim.AdamW(self.parameters(), weight_decay=self.weight_decay)

        # the file trains with weight_decay=0: the default is not the value
        model = Model(weight_decay=0.0)
        """),
    )
    invalid = (
        Invalid("""
        import argparse
        import torch
        import torchvision

        parser = argparse.ArgumentParser()
        parser.add_argument("--use_8bit_adam", action="store_true")
        parser.add_argument("--adam_weight_decay", type=float, default=1e-2)
        args = parser.parse_args()
        unet = torchvision.models.resnet50()
        if args.use_8bit_adam:
            import bitsandbytes as bnb
            optimizer_cls = bnb.optim.AdamW8bit
        else:
            optimizer_cls = torch.optim.AdamW
        optimizer = optimizer_cls(unet.parameters(), lr=1e-4, weight_decay=args.adam_weight_decay)  # TD204
        """),
        Invalid("""
        import torch
        from torch import nn

        model = nn.Sequential(nn.Linear(784, 256), nn.LayerNorm(256), nn.Linear(256, 10))
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)  # TD204
        """),
        Invalid("""
        import argparse
        import torch.optim as optim
        import torchvision

        parser = argparse.ArgumentParser()
        parser.add_argument("--wd", type=float, default=1e-4)
        args = parser.parse_args()
        model = torchvision.models.resnet50()
        optimizer = optim.SGD(model.parameters(), 0.1, 0.9, 0, args.wd)  # TD204
        """),
        Invalid("""
        import torch
        from torch.optim import Adam as Opt

        hparams = {"lr": 1e-3, "weight_decay": 5e-4}

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(10, 2)

            def configure(self):
                params = filter(lambda p: p.requires_grad, self.parameters())
                return Opt(params, **hparams)  # TD204
        """),
        Invalid("""
        import torch

        def train(model, loader):
            opt = torch.optim.AdamW(  # TD204
                [p for p in model.parameters() if p.requires_grad], lr=1e-4, weight_decay=0.05,
            )
        """),
        Invalid("""
        import torchvision
        from transformers import Trainer, TrainingArguments

        model = torchvision.models.resnet18(num_classes=10)
        args = TrainingArguments(output_dir="out", weight_decay=0.05)  # TD204
        Trainer(model=model, args=args, train_dataset=train_ds).train()
        """),
        Invalid("""
        import lightning as L
        import torch
        import torchvision

        class ImageNetModel(L.LightningModule):
            def __init__(self, lr: float = 0.1, weight_decay: float = 1e-4):
                super().__init__()
                self.save_hyperparameters()
                self.model = torchvision.models.resnet50()

            def configure_optimizers(self):
                return torch.optim.SGD(  # TD204
                    self.parameters(), lr=self.hparams.lr, momentum=0.9, weight_decay=self.hparams.weight_decay
                )
        """),
    )

    def check(self, ctx: FileContext) -> Iterable[Finding]:
        from traindoctor.facts.data.static import is_test_file
        from traindoctor.facts.evaluation.grad import self_test
        from traindoctor.facts.models.static import model_of, self_model
        from traindoctor.facts.optim.frozen import trains_part_of
        from traindoctor.facts.optim.static import optimizer_calls

        if is_test_file(ctx.filename):
            return  # optimizer recipes in test code are fixtures, not advice targets
        for opt in optimizer_calls(ctx):
            call = opt.call
            params = opt.arg(ctx, "params")
            if not isinstance(params, ast.expr):
                continue
            node = opt.arg(ctx, "weight_decay")
            for model, decay, explicit in _decayed_modules(ctx, params, node, opt.default_decay()):
                if trains_part_of(ctx, model):
                    continue  # a frozen model with an adapter or a new head: the optimizer skips what has no gradient
                if self_test(ctx, call):
                    continue  # a library module's ``__main__`` demo (a schedule plotted): nothing trains
                is_self = isinstance(model, ast.Name) and model.id == "self"
                info = self_model(ctx, call) if is_self else model_of(ctx, model)
                if info.known and not info.bias_or_norm_params():
                    continue
                detail = f"weight_decay={decay:g}" + ("" if explicit else " (its default)")
                yield ctx.report(
                    self,
                    call,
                    f"`{opt.name}` applies {detail} to every parameter of {_owner(ctx, model)}, biases and "
                    "normalisation weights included; give those a parameter group with `weight_decay=0` "
                    "(e.g. `traindoctor.recipes.param_groups(model, weight_decay)`).",
                    help="Exclude biases and norm parameters from weight decay",
                )
                break  # one finding per optimizer

        yield from self._check_hf(ctx)
        yield from self._check_helpers(ctx)

    def _check_helpers(self, ctx: FileContext) -> Iterable[Finding]:
        """``optimizer = build_optimizer(model, args)``: a helper of this file or of another
        project module builds the optimizer over all of a model's parameters with a weight decay
        its own file cannot tell (a parameter, ``args.weight_decay``); at this call it is the
        value this file passes. Reported at the call, citing the helper's optimizer."""
        from traindoctor.facts.data.static import drives_training, is_test_file
        from traindoctor.facts.models.static import model_of
        from traindoctor.facts.optim.callsite import helper_optimizers, related_in_callee, value_at
        from traindoctor.facts.optim.frozen import trains_part_of

        if is_test_file(ctx.filename) or not drives_training(ctx):
            return
        done: set[int] = set()
        for site, opt in helper_optimizers(ctx):
            call, callee, params = site.call, site.callee, site.parameters()
            if id(call) in done:
                continue  # one finding per call
            node = opt.arg(callee, "weight_decay")
            if not isinstance(node, ast.expr) or callee.value(node) is not UNKNOWN:
                continue  # the helper's own file judges it
            decay = _significant(value_at(site, node))
            given = opt.arg(callee, "params")
            model = whole_model_params(callee, given) if isinstance(given, ast.expr) else None
            if decay is None or model is None:
                continue
            if isinstance(model, ast.Name) and model.id in params:
                passed = site.argument(model.id)
                if passed is None or trains_part_of(ctx, passed):
                    continue
                info, owner = model_of(ctx, passed), f"`{ctx.segment(passed)}`"
            else:
                info, owner = model_of(callee, model), _owner(callee, model)
            if trains_part_of(callee, model) or (info.known and not info.bias_or_norm_params()):
                continue
            name = ctx.segment(call.func)
            message = f"`{opt.name}` is built here over every parameter of the model"
            related = related_in_callee(site, opt.call, message)
            done.add(id(call))
            yield ctx.report(
                self,
                call,
                f"`{name}` builds `{opt.name}` with weight_decay={decay:g} (from this call) over every "
                f"parameter of {owner}, biases and normalisation weights included; give those a "
                "parameter group with `weight_decay=0` (e.g. `traindoctor.recipes.param_groups(model, "
                "weight_decay)`).",
                help="Exclude biases and norm parameters from weight decay",
                related=related,
            )

    def _check_hf(self, ctx: FileContext) -> Iterable[Finding]:
        """``TrainingArguments(weight_decay=w)``: the Trainer's own AdamW excludes biases and
        LayerNorm (by type, and names containing ``layernorm``/``rmsnorm``/``norm``) but still
        decays BatchNorm/GroupNorm weights named like ``bn1`` or ``norm1``."""
        from traindoctor.facts.frameworks.static import (
            hf_custom_optimizer,
            hf_decayed_norm_params,
            hf_trainer_model,
            hf_training_args,
        )
        from traindoctor.facts.models.static import model_of

        for args in hf_training_args(ctx):
            decay = args.value(ctx, "weight_decay")
            if isinstance(decay, bool) or not isinstance(decay, (int, float)) or decay < NEGLIGIBLE_WEIGHT_DECAY:
                continue
            if hf_custom_optimizer(ctx):
                continue
            model = hf_trainer_model(ctx, args)
            if model is None:
                continue
            info = model_of(ctx, model)
            if info.params is None:
                continue
            missed = hf_decayed_norm_params(info.params)
            if not missed:
                continue
            shown = ", ".join(f"`{n}`" for n in missed[:3]) + (", ..." if len(missed) > 3 else "")
            yield ctx.report(
                self,
                args.anchor(ctx, "weight_decay"),
                f"The Trainer applies weight_decay={decay:g} to {len(missed)} normalisation "
                f"parameter(s) of `{ctx.segment(model)}` ({shown}): its exclusion by name and by "
                "`nn.LayerNorm` type misses BatchNorm/GroupNorm layers; override "
                "`Trainer.get_decay_parameter_names` or pass your own parameter groups with `optimizers=`.",
                help="Exclude BatchNorm/GroupNorm parameters from weight decay",
            )


# ---------------------------------------------------------------- runtime half (R2)
from traindoctor.runtime.events import Monitor  # noqa: E402


class WeightDecayOnBiasNormMonitor(Monitor):
    """Audits each optimizer's param groups at its first step (see ``facts.optim.runtime``):
    parameters of normalisation layers, biases and other rank <= 1 parameters that sit in a group
    with ``weight_decay > 0``. Classification is by module type and rank, never by name."""

    rule = WeightDecayOnBiasNorm

    def on_optimizer_found(self, optimizer: Optimizer) -> None:
        from traindoctor.facts.optim.runtime import audit_optimizer

        audit = audit_optimizer(optimizer, self.session)
        if not audit.decayed or max(audit.decays) < NEGLIGIBLE_WEIGHT_DECAY:
            return
        n = len(audit.decayed)
        decays = ", ".join(f"{d:g}" for d in audit.decays)
        from traindoctor.runtime.live import site_kwargs

        self.report(
            f"{type(optimizer).__name__} applies weight decay ({decays}) to {n} bias/normalisation "
            f"parameter(s); put them in a group with `weight_decay=0.0` "
            "(`traindoctor.recipes.param_groups(model, weight_decay)`).",
            evidence={
                "decayed": n,
                "no_decay_params": audit.no_decay_total,
                "kinds": audit.kinds(),
                "names": audit.names(),
                "weight_decay": audit.decays,
                "param_groups": audit.groups,
            },
            step=self.session.step,
            **site_kwargs(getattr(self.session, "optimizer_site", lambda _o: None)(optimizer)),
        )
