"""What the training frameworks decide for the user, read from the calls that configure them.

Hugging Face ``TrainingArguments``/``Trainer``, Lightning ``Trainer``/``LightningModule``/
``Fabric``, ``accelerate.Accelerator`` and NVIDIA apex each own some of the settings the ten
mistakes are about: the DataLoader a ``Trainer`` builds takes its workers, pinning and
persistence from ``TrainingArguments``; ``Accelerator(mixed_precision="fp16")`` owns the
GradScaler; Lightning's ``benchmark=`` sets ``cudnn.benchmark``. Rules ask this module, never the
frameworks themselves: nothing here imports a framework, so checking needs none installed.

Only what a call spells out counts, and what the command line gets by default: arguments parsed
by ``HfArgumentParser((..., TrainingArguments)).parse_args_into_dataclasses()`` hold the fields'
defaults (the dataclass's own, or a project subclass's), as an argparse option holds its default.
Arguments from ``**kwargs`` we cannot read, from positional arguments we do not know or from a
JSON/YAML file (``parse_json_file``) are UNKNOWN, and rules stay silent on UNKNOWN.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from traindoctor.static.args import MISSING, UNKNOWN
from traindoctor.static.context import FileContext, FrameworkHooks
from traindoctor.static.names import dotted, receiver
from traindoctor.static.vocab import HF_TRIGGERS  # re-exported (rules' ``triggers``)

# ---------------------------------------------------------------------------------------- names

#: ``transformers`` argument dataclasses that configure ``Trainer``'s loaders, precision and saving.
HF_TRAINING_ARGS = frozenset(
    {
        "transformers.TrainingArguments",
        "transformers.Seq2SeqTrainingArguments",
        "transformers.training_args.TrainingArguments",
        "transformers.training_args_seq2seq.Seq2SeqTrainingArguments",
        # TRL's configs subclass TrainingArguments and keep its loader/precision/saving fields
        "trl.SFTConfig",
        "trl.DPOConfig",
        "trl.GRPOConfig",
        "trl.RewardConfig",
        "trl.ORPOConfig",
        "trl.KTOConfig",
        "trl.CPOConfig",
    }
)
#: Packages whose ``*Trainer`` classes are the transformers Trainer (or subclasses of it).
HF_TRAINER_PACKAGES = ("transformers.", "trl.")
#: Defaults of the ``TrainingArguments`` fields the rules read (transformers 4.x and 5.x agree).
HF_DEFAULTS: dict[str, Any] = {
    "dataloader_num_workers": 0,
    "dataloader_pin_memory": True,
    "dataloader_persistent_workers": False,
    "weight_decay": 0.0,
    "fp16": False,
    "bf16": False,
    "save_only_model": False,
    "save_strategy": "steps",
    "gradient_accumulation_steps": 1,
    "per_device_train_batch_size": 8,
    "num_train_epochs": 3.0,
    "max_steps": -1,
    "use_cpu": False,
    "no_cuda": False,
}
#: Name patterns ``Trainer.get_decay_parameter_names`` excludes from weight decay (besides
#: ``nn.LayerNorm`` modules, excluded by type).
HF_NO_DECAY_PATTERNS = (r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)")

LIGHTNING_TRAINERS = frozenset(
    {
        "lightning.Trainer",
        "lightning.pytorch.Trainer",
        "pytorch_lightning.Trainer",
        "lightning.pytorch.trainer.Trainer",
        "pytorch_lightning.trainer.Trainer",
        "lightning.pytorch.trainer.trainer.Trainer",
        "pytorch_lightning.trainer.trainer.Trainer",
    }
)
FABRICS = frozenset(
    {
        "lightning.Fabric",
        "lightning.fabric.Fabric",
        "lightning_fabric.Fabric",
        "lightning.fabric.fabric.Fabric",
        "lightning_fabric.fabric.Fabric",
    }
)
LIGHTNING_CLI = frozenset(
    {"lightning.pytorch.cli.LightningCLI", "pytorch_lightning.cli.LightningCLI", "lightning.pytorch.LightningCLI"}
)
LIGHTNING_BASES = ("LightningModule", "LightningDataModule")
ACCELERATORS = frozenset({"accelerate.Accelerator", "accelerate.accelerator.Accelerator"})

#: Lightning's legacy ``precision`` spellings and the names it asks for instead (AMP ones only:
#: ``32``/``64`` are not mixed precision).
LIGHTNING_PRECISION_ALIASES = {16: "16-mixed", "16": "16-mixed", "bf16": "bf16-mixed"}
#: NVIDIA apex AMP entry points (deprecated in favour of ``torch.amp``).
APEX_AMP = frozenset({"apex.amp.initialize", "apex.amp.scale_loss"})


def _mentions(ctx: FileContext, *words: str) -> bool:
    """A cheap text pre-check before resolving calls: the file spells one of ``words``."""
    source = ctx.source
    return any(w in source for w in words)


# ---------------------------------------------------------------------------------------- HF


@dataclass(frozen=True)
class HfArgs:
    """One ``TrainingArguments(...)`` call and how to read its fields."""

    call: ast.Call
    #: True when a ``**kwargs`` or extra positional argument hides fields we cannot read.
    opaque: bool
    #: True for arguments parsed from the command line (``call`` is the parse): every field holds
    #: its default, which a project subclass may change (``defaults``).
    parsed: bool = False
    #: The class the parse builds, when the project defines it (a subclass of TrainingArguments).
    subclass: Any = None

    def node(self, ctx: FileContext, field: str) -> Any:
        """The expression passed for ``field``: a node, MISSING or UNKNOWN."""
        if self.parsed:
            return MISSING
        return ctx.arg(self.call, field, qualname="")

    def value(self, ctx: FileContext, field: str) -> Any:
        """The field's value: what the call passes, its default when not passed, else UNKNOWN."""
        node = self.node(ctx, field)
        if node is MISSING:
            if self.opaque:
                return UNKNOWN
            if self.subclass is not None:
                from traindoctor.static.class_configs import declared, declares

                if declares(self.subclass, field):
                    found = declared(self.subclass, field)
                    return found.value if found is not None and found.nested is None else UNKNOWN
            return HF_DEFAULTS.get(field, UNKNOWN)
        if node is UNKNOWN:
            return UNKNOWN
        return ctx.value(node)

    def anchor(self, ctx: FileContext, field: str) -> ast.expr:
        """Where to report about ``field``: its keyword value when written in the call."""
        node = self.node(ctx, field)
        if isinstance(node, ast.expr) and ctx.within(node, self.call):  # not MISSING or UNKNOWN
            return node
        return self.call

    def on_gpu(self, ctx: FileContext) -> bool:
        """The Trainer uses a CUDA device when there is one (unless told to use the CPU)."""
        return self.value(ctx, "use_cpu") is False and self.value(ctx, "no_cuda") is False


def hf_training_args(ctx: FileContext) -> list[HfArgs]:
    """``TrainingArguments(...)`` calls of a file that trains a ``transformers`` Trainer.

    A file that builds the arguments but never calls ``.train()`` on a Trainer (evaluation or
    prediction scripts) has none; neither do test files.
    """
    return ctx.shared("frameworks.hf_args", _hf_training_args)


def _hf_training_args(ctx: FileContext) -> list[HfArgs]:
    from traindoctor.facts.data.static import is_test_file

    if "TrainingArguments" not in ctx.source and "trl" not in ctx.source:
        return []  # cheap: most files that mention ``Config`` are not TRL scripts
    calls = ctx.calls_to(*sorted(HF_TRAINING_ARGS))
    if not (calls or "HfArgumentParser" in ctx.source) or is_test_file(ctx.filename) or not _trains_hf_trainer(ctx):
        return []
    out = []
    for call in calls:
        opaque = len(call.args) > 1 or any(isinstance(a, ast.Starred) for a in call.args)
        for kw in call.keywords:
            if kw.arg is None and ctx.dict_literal(kw.value) is None:
                opaque = True
        out.append(HfArgs(call, opaque))
    return out + _parsed_training_args(ctx)


def _parsed_training_args(ctx: FileContext) -> list[HfArgs]:
    """``a, b, training_args = HfArgumentParser((A, B, TrainingArguments)).parse_args_into_dataclasses()``:
    the command line's defaults. Silent where the same names are also parsed from a file
    (``parse_json_file``): the file's values are not ours to read."""
    from traindoctor.static.class_configs import hf_parse_classes, resolve_class

    if "HfArgumentParser" not in ctx.source:
        return []
    out: list[HfArgs] = []
    from_files: set[str] = set()
    parses: list[tuple[ast.Call, str, Any]] = []
    for assign in ctx.of(ast.Assign):
        value = assign.value
        if len(assign.targets) != 1 or not isinstance(value, ast.Call):
            continue
        target = assign.targets[0]
        names = [
            t.id if isinstance(t, ast.Name) else ""
            for t in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])
        ]
        classes = hf_parse_classes(ctx, value)
        if classes is None:
            continue
        for name, cls in zip(names, classes):
            qn = ctx.qualname(cls) or ""
            project_cls = None
            if qn not in HF_TRAINING_ARGS:
                project_cls = resolve_class(ctx, cls)
                if project_cls is None or not _subclasses_training_args(project_cls):
                    continue
            if isinstance(value.func, ast.Attribute) and value.func.attr != "parse_args_into_dataclasses":
                from_files.add(name)
            else:
                parses.append((value, name, project_cls))
    for call, name, project_cls in parses:
        if name and name not in from_files:
            out.append(HfArgs(call, False, parsed=True, subclass=project_cls))
    return out


def _subclasses_training_args(cls: Any, depth: int = 0) -> bool:
    """Whether a project class derives from transformers' ``TrainingArguments`` (or a TRL config)."""
    from traindoctor.static.class_configs import resolve_class

    if depth > 4:
        return False
    for base in cls.node.bases:
        if (cls.ctx.qualname(base) or "") in HF_TRAINING_ARGS:
            return True
        parent = resolve_class(cls.ctx, base)
        if parent is not None and _subclasses_training_args(parent, depth + 1):
            return True
    return False


def hf_trainer_calls(ctx: FileContext) -> list[ast.Call]:
    """Constructions of a ``transformers`` Trainer (``Trainer``, ``Seq2SeqTrainer``, TRL's ``SFTTrainer``
    and friends, subclasses defined in the file)."""
    out = []
    local = _local_subclasses(ctx, lambda qn: qn.startswith(HF_TRAINER_PACKAGES) and qn.endswith("Trainer"))
    for call in ctx.of(ast.Call):
        qn = ctx.qualname(call.func) or ""
        if (qn.startswith(HF_TRAINER_PACKAGES) and qn.endswith("Trainer")) or (
            isinstance(call.func, ast.Name) and call.func.id in local
        ):
            out.append(call)
    return out


def _local_subclasses(ctx: FileContext, base_ok: Any) -> set[str]:
    names: set[str] = set()
    for cls in ctx.of(ast.ClassDef):
        for base in cls.bases:
            qn = ctx.qualname(base) or ""
            if base_ok(qn) or (isinstance(base, ast.Name) and base.id in names):
                names.add(cls.name)
    return names


def _trains_hf_trainer(ctx: FileContext) -> bool:
    """``trainer.train(...)`` where ``trainer`` is a Trainer built in this file."""
    trainers = hf_trainer_calls(ctx)
    if not trainers:
        return False
    ids = {id(c) for c in trainers}
    for call in ctx.method_calls("train"):
        recv = receiver(call)
        if isinstance(recv, ast.Call) and id(recv) in ids:
            return True
        if isinstance(recv, ast.Name):
            bound = ctx.bindings_of(recv) or []
            if any(isinstance(b, ast.Call) and id(b) in ids for b in bound):
                return True
        if "trainer" in (dotted(recv) or "").lower():
            return True
    return False


def hf_trainer_model(ctx: FileContext, args: HfArgs) -> ast.expr | None:
    """The model given to the Trainer that receives ``args`` (the only Trainer of the file)."""
    trainers = hf_trainer_calls(ctx)
    if len(trainers) != 1:
        return None
    call = trainers[0]
    for kw in call.keywords:
        if kw.arg == "model":
            return kw.value
    if call.args and not isinstance(call.args[0], ast.Starred):
        return call.args[0]
    return None


def hf_custom_optimizer(ctx: FileContext) -> bool:
    """A Trainer given its own optimizer (``optimizers=(opt, sched)``, ``optimizer_cls_and_kwargs``)
    or a subclass that overrides ``create_optimizer``: ``weight_decay`` is not applied by Trainer."""
    for call in hf_trainer_calls(ctx):
        if any(kw.arg in ("optimizers", "optimizer_cls_and_kwargs") for kw in call.keywords):
            return True
        if len(call.args) > 8:
            return True
    return any(fn.name == "create_optimizer" for fn in ctx.of(ast.FunctionDef))


def hf_decayed_norm_params(params: tuple[tuple[str, str], ...]) -> list[str]:
    """Norm parameters the Trainer's name/type exclusion still decays (BatchNorm, GroupNorm, ``norm1``)."""
    from traindoctor.static.names import NORM_LAYERS

    patterns = [re.compile(p) for p in HF_NO_DECAY_PATTERNS]
    out = []
    for name, kind in params:
        if kind not in NORM_LAYERS or kind == "torch.nn.LayerNorm":
            continue
        low = name.lower()
        if any(p.search(low) for p in patterns):
            continue
        out.append(name)
    return out


# ---------------------------------------------------------------------------------------- Lightning


def lightning_trainers(ctx: FileContext) -> list[ast.Call]:
    """``Trainer(...)`` calls of Lightning (any of its import paths)."""
    return ctx.calls_to(*sorted(LIGHTNING_TRAINERS))


def fabrics(ctx: FileContext) -> list[ast.Call]:
    return ctx.calls_to(*sorted(FABRICS))


#: ``Trainer`` arguments and ``LightningModule`` hooks that Lightning 2.0 removed: a file using
#: them is written for Lightning 1.x.
LIGHTNING_1X_ARGS = frozenset(
    {
        "gpus",
        "tpu_cores",
        "ipus",
        "progress_bar_refresh_rate",
        "resume_from_checkpoint",
        "checkpoint_callback",
        "weights_summary",
        "auto_select_gpus",
        "flush_logs_every_n_steps",
        "distributed_backend",
        "amp_backend",
        "amp_level",
        "track_grad_norm",
        "replace_sampler_ddp",
        "multiple_trainloader_mode",
    }
)
LIGHTNING_1X_HOOKS = frozenset({"training_epoch_end", "validation_epoch_end", "test_epoch_end", "predict_epoch_end"})


def lightning_major(ctx: FileContext) -> int | None:
    """The Lightning major version the file is written for: 1 when the project pins Lightning
    below 2.0 or the file uses what 2.0 removed (``Trainer(gpus=...)``, ``training_epoch_end``),
    2 when the project pins 2.x, else None (unknown)."""
    return ctx.shared("frameworks.lightning_major", _lightning_major)


def _lightning_major(ctx: FileContext) -> int | None:
    from traindoctor.static.requirements import pinned_major

    for call in lightning_trainers(ctx):
        if any(kw.arg in LIGHTNING_1X_ARGS for kw in call.keywords):
            return 1
    for fn in ctx.of(ast.FunctionDef):
        if fn.name in LIGHTNING_1X_HOOKS and is_lightning_class(ctx, ctx.parent(fn)):
            return 1
    view = ctx.project
    if view is None:
        return None
    return pinned_major(view.project.root, ("pytorch-lightning", "lightning"))


def lightning_flag(ctx: FileContext, name: str) -> Iterator[tuple[ast.AST, Any]]:
    """(node, value) for each place a Lightning Trainer flag is set: ``Trainer(name=...)`` or
    ``LightningCLI(..., trainer_defaults={name: ...})``."""
    if not _mentions(ctx, "Trainer", "LightningCLI"):
        return
    for call in lightning_trainers(ctx):
        node = ctx.arg(call, name, qualname="")
        if isinstance(node, ast.AST):
            yield node, ctx.value(node)
    for call in ctx.calls_to(*sorted(LIGHTNING_CLI)):
        defaults = ctx.arg(call, "trainer_defaults", qualname="")
        if isinstance(defaults, ast.AST):
            mapping = ctx.dict_literal(defaults)
            if mapping is not None and name in mapping:
                yield mapping[name], ctx.value(mapping[name])


def is_lightning_class(ctx: FileContext, cls: ast.AST | None) -> bool:
    """A class of this file that subclasses ``LightningModule`` or ``LightningDataModule``."""
    if not isinstance(cls, ast.ClassDef):
        return False
    for base in cls.bases:
        text = ctx.qualname(base) or dotted(base) or ""
        if text.endswith(LIGHTNING_BASES):
            return True
    return False


def lightning_hparam(ctx: FileContext, node: ast.Attribute, *, declared: bool = False) -> Any:
    """The value of ``self.x`` / ``self.hparams.x`` inside a LightningModule/DataModule, from
    the ``__init__`` default of the parameter it is set from, else UNKNOWN.

    Lightning's convention is that ``__init__`` arguments are the hyperparameters and their
    defaults are the run's values (``LightningCLI`` exposes them as command-line defaults, as
    argparse defaults are). Only when ``self.x`` is assigned exactly once in the class, straight
    from the parameter ``x`` (or stored by ``self.save_hyperparameters()``), and no call of the
    class in this file passes that argument or opaque ``*args``/``**kwargs``. ``declared`` asks
    for the default even when other methods reassign ``self.x`` later (``setup()`` dividing the
    workers per device): what the user declared, not necessarily the final value.
    """
    base = node.value
    if isinstance(base, ast.Attribute) and base.attr == "hparams" and isinstance(base.value, ast.Name):
        owner, attr, via_hparams = base.value, node.attr, True
    elif isinstance(base, ast.Name):
        owner, attr, via_hparams = base, node.attr, False
    else:
        return UNKNOWN
    if owner.id != "self":
        return UNKNOWN
    cls = ctx.enclosing(node, ast.ClassDef)
    if not isinstance(cls, ast.ClassDef) or not is_lightning_class(ctx, cls):  # (a class or None)
        return UNKNOWN
    init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None:
        return UNKNOWN
    param = _init_param(init, attr)
    if param is None:
        return UNKNOWN
    stores = [
        n
        for n in ast.walk(cls)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, (ast.Store, ast.Del))
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        and n.attr == attr
    ]
    if via_hparams:
        saves = [c for c in ast.walk(init) if isinstance(c, ast.Call) and dotted(c.func) == "self.save_hyperparameters"]
        if not saves or stores or any(c.args for c in saves if not _names_param(c, attr)):
            return UNKNOWN
    else:
        from_param = [
            s
            for s in stores
            if isinstance(p := ctx.parent(s), (ast.Assign, ast.AnnAssign))
            and isinstance(p.value, ast.Name)
            and p.value.id == attr
            and ctx.function_of(p) is init
        ]
        if len(from_param) != 1 or (len(stores) != 1 and not declared):
            return UNKNOWN
    if _class_called_with(ctx, cls, init, attr):
        return UNKNOWN
    if any(isinstance(n, ast.Name) and n.id == attr and not isinstance(n.ctx, ast.Load) for n in ast.walk(init)):
        return UNKNOWN  # ``num_workers = 0`` on some platforms: the default is not the value
    return ctx.value(param)


def _names_param(call: ast.Call, attr: str) -> bool:
    return any(isinstance(a, ast.Constant) and a.value == attr for a in call.args)


def _init_param(init: ast.FunctionDef, name: str) -> ast.expr | None:
    """The default expression of ``__init__``'s parameter ``name`` (None: no such default)."""
    a = init.args
    positional = [*a.posonlyargs, *a.args]
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for p, d in zip(positional, defaults):
        if p.arg == name:
            return d
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        if p.arg == name:
            return d
    return None


def _class_called_with(ctx: FileContext, cls: ast.ClassDef, init: ast.FunctionDef, attr: str) -> bool:
    """Whether some call of ``cls`` in the file may pass ``attr`` (by name, position or ``**``)."""
    names = [p.arg for p in [*init.args.posonlyargs, *init.args.args][1:]]
    index = names.index(attr) if attr in names else None
    for call in ctx.of(ast.Call):
        if not (isinstance(call.func, ast.Name) and call.func.id == cls.name):
            continue
        if any(kw.arg in (None, attr) for kw in call.keywords):
            return True
        if any(isinstance(a, ast.Starred) for a in call.args):
            return True
        if index is not None and len(call.args) > index:
            return True
    return False


# ---------------------------------------------------------------------------------------- accelerate / precision


def accelerator_mixed_precision(ctx: FileContext) -> list[tuple[ast.Call, Any]]:
    """(``Accelerator(...)`` call, its ``mixed_precision`` value) for each Accelerator."""
    out = []
    for call in ctx.calls_to(*sorted(ACCELERATORS)):
        node = ctx.arg(call, "mixed_precision", qualname="")
        out.append((call, None if node is MISSING else (UNKNOWN if node is UNKNOWN else ctx.value(node))))
    return out


def framework_backward_unscaled(ctx: FileContext, receiver: ast.AST) -> bool:
    """Whether ``receiver.backward(loss)`` is a framework backward known *not* to scale the loss:
    the file's every ``Accelerator``/``Fabric`` is told a precision without float16 loss scaling
    (``mixed_precision="no"``/``"bf16"``, ``precision="bf16-mixed"``/``"32-true"``). Unknown
    settings (config files, ``accelerate launch --mixed_precision``) count as scaling."""
    name = (dotted(receiver) or "").rsplit(".", 1)[-1].lower()
    scaled: tuple[int | str, ...]
    if "accelerator" in name:
        calls, key, scaled = ctx.calls_to(*sorted(ACCELERATORS)), "mixed_precision", ("fp16",)
    elif "fabric" in name:
        calls, key, scaled = fabrics(ctx), "precision", (16, "16", "16-mixed")
    else:
        return False
    if not calls:
        return False
    for call in calls:
        node = ctx.arg(call, key, qualname="")
        if not isinstance(node, ast.AST):
            return False
        value = ctx.value(node)
        if value is UNKNOWN or value in scaled or value is None:
            return False
    return True


@dataclass(frozen=True)
class Fp16Choice:
    """A framework told to train in float16 mixed precision: where, and what to write instead."""

    node: ast.expr
    framework: str
    setting: str
    instead: str


def fp16_choices(ctx: FileContext) -> list[Fp16Choice]:
    """Framework configurations that pick float16 autocast (``fp16=True``, ``precision="16-mixed"``,
    ``mixed_precision="fp16"``), where bfloat16 would need no loss scaling on Ampere or newer GPUs."""
    from traindoctor.facts.data.static import is_test_file

    out: list[Fp16Choice] = []
    if is_test_file(ctx.filename) or not _mentions(ctx, "Trainer", "Fabric", "Accelerator", *HF_TRIGGERS):
        return out  # test suites exercise every precision on purpose
    for args in hf_training_args(ctx):
        if args.value(ctx, "fp16") is True and args.value(ctx, "bf16") is False and args.on_gpu(ctx):
            out.append(Fp16Choice(args.anchor(ctx, "fp16"), "TrainingArguments", "fp16=True", "bf16=True"))
    for call in [*lightning_trainers(ctx), *fabrics(ctx)]:
        node = ctx.arg(call, "precision", qualname="")
        if isinstance(node, ast.expr) and ctx.value(node) in (16, "16", "16-mixed"):  # not MISSING or UNKNOWN
            owner = "Fabric" if ctx.qualname(call.func) in FABRICS else "Trainer"
            out.append(Fp16Choice(node, owner, f"precision={ctx.segment(node)}", 'precision="bf16-mixed"'))
    for call, value in accelerator_mixed_precision(ctx):
        if value == "fp16":
            given = cast(ast.expr, ctx.arg(call, "mixed_precision", qualname=""))  # its value was read
            out.append(Fp16Choice(given, "Accelerator", 'mixed_precision="fp16"', 'mixed_precision="bf16"'))
    out.sort(key=lambda c: (c.node.lineno, c.node.col_offset))
    return out


def framework_targets_cuda(ctx: FileContext) -> bool:
    """A framework that runs on a CUDA device whenever there is one (HF Trainer, Lightning
    ``Trainer``/``Fabric`` with the default ``accelerator="auto"`` or a GPU one, ``Accelerator``),
    unless the call pins the CPU."""
    if not _mentions(ctx, "Trainer", "Fabric", "Accelerator", *HF_TRIGGERS):
        return False
    for args in hf_training_args(ctx):
        if args.on_gpu(ctx):
            return True
    for call in [*lightning_trainers(ctx), *fabrics(ctx)]:
        node = ctx.arg(call, "accelerator", qualname="")
        if node is MISSING or (isinstance(node, ast.AST) and ctx.value(node) in ("auto", "gpu", "cuda")):
            return True
    for call in ctx.calls_to(*sorted(ACCELERATORS)):
        node = ctx.arg(call, "cpu", qualname="")
        if node is MISSING or (isinstance(node, ast.AST) and ctx.value(node) is False):
            return True
    return False


#: Methods that wrap a DataLoader in a framework loader which calls ``sampler.set_epoch`` itself
#: on every pass (accelerate's ``DataLoaderShard``, Fabric's ``_FabricDataLoader``).
_EPOCH_SETTING_WRAPPERS = frozenset({"prepare", "prepare_data_loader", "setup_dataloaders"})


def framework_sets_epoch(ctx: FileContext, loader: Any) -> bool:
    """Whether a framework iterates ``loader`` (a :class:`~traindoctor.facts.data.static.Loader`)
    and sets its sampler's epoch: it is returned by a Lightning ``train_dataloader`` hook (the fit
    loop sets the epoch), or handed to ``accelerator.prepare(...)`` / ``fabric.setup_dataloaders(...)``."""
    if any(site.kind == "hook" for site in loader.sites):
        return True
    for ref in loader.refs:
        parent = ctx.parent(ref)
        if isinstance(parent, ast.keyword):
            parent = ctx.parent(parent)
        if (
            isinstance(parent, ast.Call)
            and isinstance(parent.func, ast.Attribute)
            and parent.func.attr in _EPOCH_SETTING_WRAPPERS
            and parent.func is not ref
        ):
            return True
    return False


def apex_amp_calls(ctx: FileContext) -> list[tuple[str, ast.Call]]:
    """(qualified name, call) of NVIDIA apex AMP entry points (``amp.initialize``, ``amp.scale_loss``)."""
    return [(qn, c) for qn in sorted(APEX_AMP) for c in ctx.calls_to(qn)]


#: The conventions a file's context consults without importing this module (see
#: :class:`~traindoctor.static.context.FrameworkHooks`); the engine hands them to every context.
HOOKS = FrameworkHooks(attribute_value=lightning_hparam, targets_cuda=framework_targets_cuda)
