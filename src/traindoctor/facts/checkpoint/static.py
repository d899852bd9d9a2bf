"""What a file checkpoints, shared by the TD50x rules.

The checkpoint rules all ask the same questions about one file, so they are answered here once
(:func:`checkpoint_index`, cached per :class:`FileContext`):

* Which training objects the file builds (optimizers, LR schedulers, GradScalers, samplers and
  loaders), found at their constructor calls and filed under the name they are assigned to.
* Where it saves (``torch.save`` and a few same-signature wrappers) and *what* each save holds:
  the pieces of the saved object (``model.state_dict()``, ``optimizer.state_dict()``, RNG
  getters, ...), following a dict built in a variable across statements
  (``ckpt = {...}; ckpt["optimizer"] = ...; ckpt.update(...)``) and, one level deep, a local
  helper whose parameter is what gets saved (``def save_checkpoint(state, path): torch.save(...)``).
* Whether a save runs inside the training loop (a loop around ``backward()`` / ``optimizer.step()``
  or around a call of a local function that trains), and whether mid-epoch (inside the batch loop).

Precision comes first: whatever cannot be read (a value from an unknown call, a parameter nobody in
the file passes, a dict handed to an unknown function) is an *opaque* piece that may hold anything
its dict key does not rule out, and the rules treat "may hold" as "holds". The file-level view
(``may_hold_anywhere``) unions every save, so a model-only "best" export next to a full checkpoint
elsewhere in the file is never mistaken for the training checkpoint.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from traindoctor.static.args import MISSING, UNKNOWN
from traindoctor.static.names import OPTIMIZERS, dotted
from traindoctor.static.vocab import (  # piece kinds, re-exported for the rules
    DATA,
    META,
    MODEL,
    OPAQUE,
    OPTIMIZER,
    RNG_ANY,
    RNG_CPU,
    RNG_CUDA,
    RNG_KINDS,
    RNG_NUMPY,
    RNG_PYTHON,
    SCALER,
    SCHEDULER,
)

if TYPE_CHECKING:
    from traindoctor.facts.checkpoint.kinds import SaveFacts  # pragma: no cover
    from traindoctor.static.context import FileContext

# ---------------------------------------------------------------------------------- vocabulary
#: Piece kinds (MODEL, OPTIMIZER, ..., RNG_KINDS) are defined in ``vocab`` and imported above.

SAVE_FUNCS = ("torch.save", "torch_xla.core.xla_model.save")
LOAD_FUNCS = ("torch.load",)
#: Saves that write a complete, atomic training checkpoint by construction.
COMPLETE_SAVES = ("traindoctor.checkpoint.save",)
COMPLETE_LOADS = ("traindoctor.checkpoint.load",)
#: ``torch.distributed.checkpoint`` saves and loads: ``(state_dict, *, checkpoint_id=...)``; a load
#: fills only the keys of the dict it is given.
DCP_SAVES = (
    "torch.distributed.checkpoint.save",
    "torch.distributed.checkpoint.async_save",
    "torch.distributed.checkpoint.save_state_dict",
    "torch.distributed.checkpoint.state_dict_saver.save",
    "torch.distributed.checkpoint.state_dict_saver.async_save",
)
DCP_LOADS = (
    "torch.distributed.checkpoint.load",
    "torch.distributed.checkpoint.load_state_dict",
    "torch.distributed.checkpoint.state_dict_loader.load",
)
#: DCP's state-dict helpers (torch.distributed.checkpoint.state_dict) and what they return.
_DCP_GETTERS = {
    "get_model_state_dict": (MODEL,),
    "get_optimizer_state_dict": (OPTIMIZER,),
    "get_state_dict": (MODEL, OPTIMIZER),
}
#: Methods that save the whole training state of a framework object (``accelerator.save_state``).
_COMPLETE_METHODS = {"save_state": ("accelerator",), "save_checkpoint": ("trainer", "engine", "deepspeed")}
#: Unresolved wrappers with torch.save's (obj, f) signature, by receiver-or-function name.
_SAVE_WRAPPERS = {"save_on_master", "save_on_main_process"}  # all spell "save_on_ma" (see _find_save_calls)

SCALER_CTORS = frozenset(
    {
        "torch.amp.GradScaler",
        "torch.cuda.amp.GradScaler",
        "torch.cpu.amp.GradScaler",
        "torch.GradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
        "timm.utils.NativeScaler",
        "timm.utils.cuda.NativeScaler",
    }
)
SAMPLER_CTORS = frozenset(
    {
        "torch.utils.data.DistributedSampler",
        "torch.utils.data.RandomSampler",
        "torch.utils.data.sampler.RandomSampler",
    }
)
_OTHER_OPTIMIZERS = ("transformers.AdamW", "transformers.Adafactor", "transformers.optimization.")
_OPTIMIZER_PREFIXES = ("timm.optim.", "bitsandbytes.optim.", "apex.optimizers.", "torch.distributed.optim.")

RNG_GETTERS: dict[str, str] = {
    "torch.get_rng_state": RNG_CPU,
    "torch.random.get_rng_state": RNG_CPU,
    "torch.default_generator.get_state": RNG_CPU,
    "torch.random.default_generator.get_state": RNG_CPU,
    "torch.cuda.get_rng_state": RNG_CUDA,
    "torch.cuda.get_rng_state_all": RNG_CUDA,
    "torch.cuda.random.get_rng_state": RNG_CUDA,
    "torch.cuda.random.get_rng_state_all": RNG_CUDA,
    "numpy.random.get_state": RNG_NUMPY,
    "random.getstate": RNG_PYTHON,
}
#: numpy.random / random calls that do not draw from the global generator.
_NUMPY_NON_DRAWS = {
    "seed",
    "get_state",
    "set_state",
    "default_rng",
    "RandomState",
    "Generator",
    "SeedSequence",
    "PCG64",
    "MT19937",
    "Philox",
    "SFC64",
    "BitGenerator",
}
_PYTHON_NON_DRAWS = {"seed", "getstate", "setstate", "Random", "SystemRandom"}

# Names (last part, lower case) that say what an object is when no constructor tells us.
_RX_OPTIMIZER = re.compile(r"optim|(^|_)opts?\d*(_|$)")
_RX_SCHEDULER = re.compile(r"sched")
_RX_SCALER = re.compile(r"scaler")
_RX_DATA = re.compile(r"sampler|loader")
_RX_RNG = re.compile(r"rng|random|generator_state|seed_state")
_RX_MODELISH = re.compile(
    r"model|net|ema|module|backbone|encoder|decoder|generator|discriminator|classifier|head|weights|params"
)
_RX_GENERIC_STATE = re.compile(r"state|ckpt|checkpoint|extra|misc|other|save|bundle|payload|train")
#: Dict keys that name plain metadata: an opaque value under them holds no training state.
_RX_META_KEY = re.compile(
    r"^(epochs?|steps?|global_steps?|iters?|iterations?|it|batch(_idx)?|best\w*|\w*loss\w*|\w*acc\w*|"
    r"\w*metric\w*|\w*score\w*|lr|args|config|cfg|hparams|hyper_parameters|hyperparameters|arch|"
    r"name|model_name|version|\w*time\w*|date|seed|opts?_args|num_\w+|\w*perplexity\w*|\w*bleu\w*|"
    r"\w*f1\w*|\w*auc\w*|\w*map\w*|tokenizer\w*|vocab\w*|classes|class_names|labels?|git\w*|"
    r"commit|\w*info|notes?|host\w*|user|desc\w*|tags?|\w*_id|id|env\w*|platform|torch_version|"
    r"world_size|\w*count\w*|updates)$"
)
#: Dict keys that record where in the data the run is (enough to restore the data position).
#: Keys of a step/epoch counter saved beside the weights: the save is meant to be resumed from.
_RX_COUNTER_KEY = re.compile(r"^(epochs?|steps?|global_steps?|iters?|iterations?|iter_num|it)$")
_RX_DATA_KEY = re.compile(r"step|iter|batch|sampler|loader|data_?state|position|offset|consumed|samples_seen")
#: Names of saved objects that are data, not training state (features, caches, predictions...).
_RX_DATAISH = re.compile(
    r"feat|cache|dataset|embed|tensor|result|pred|output|logit|stat|vocab|token|label|image|img|"
    r"metric|hist|mean|std|buffer|activation|grad|mask|index|sample|example|input|target|score|"
    r"audio|text|corpus|dump|record|quant|scale|calib|graph|trace|export|onnx|config|meta"
)
_HARMLESS_CALLS = {
    "int",
    "float",
    "str",
    "len",
    "vars",
    "bool",
    "round",
    "repr",
    "list",
    "tuple",
    "sorted",
    "getattr",
    "hasattr",
    "isinstance",
    "time",
    "datetime",
    "now",
    "item",
    "tolist",
    "numpy",
    "get_lr",
    "get_last_lr",
    "format",
    "join",
    "__repr__",
    "asdict",
    "to_dict",
    "to_json_string",
    "type",
    "id",
    "max",
    "min",
    "sum",
    "abs",
    "isoformat",
    "strftime",
    "getcwd",
    "gethostname",
    "uuid4",
    "hex",
}
_PASS_THROUGH_CALLS = {
    "deepcopy",
    "copy",
    "cpu",
    "to",
    "clone",
    "detach",
    "OrderedDict",
    "dict",
    "half",
    "float",
    "contiguous",
}
#: Pass-through methods whose value is their receiver (``x.to(device)``, ``x.cpu()``).
_RECEIVER_METHODS = frozenset({"to", "cpu", "clone", "detach", "half", "float", "contiguous"})
#: Callee names that say the call reads a checkpoint back (load/restore/resume): no save.
_RX_READS_CHECKPOINT = re.compile(r"load|restore|resume|restart")
_RX_CKPT_FILE = re.compile(r"^[\w\-.]*[A-Za-z0-9_\-]\.(pt|pth|ckpt|tar|bin|pkl)$")

_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
#: Framework hooks run once per epoch or step of the framework's own training loop (Lightning
#: ``Callback``/``LightningModule`` hooks, Hugging Face ``TrainerCallback`` events).
_PERIODIC_HOOKS = frozenset(
    {
        "on_train_epoch_end",
        "on_train_epoch_start",
        "on_train_batch_end",
        "on_validation_epoch_end",
        "training_epoch_end",
        "validation_epoch_end",  # Lightning < 2
        "on_epoch_end",
        "on_epoch_begin",
        "on_step_end",
        "on_evaluate",
        "on_save",  # TrainerCallback
    }
)


def kind_from_name(name: str) -> str | None:
    """What a variable or attribute name says the object is (``opt_g`` -> optimizer), else None."""
    last = name.rsplit(".", 1)[-1].lower()
    if _RX_SCHEDULER.search(last):
        return SCHEDULER
    if _RX_SCALER.search(last):
        return SCALER
    if _RX_OPTIMIZER.search(last):
        return OPTIMIZER
    if _RX_DATA.search(last):
        return DATA
    return None


def _builds_model(ctx: FileContext, call: ast.Call) -> bool:
    """Whether a call builds an ``nn.Module`` the file (or its project) spells out."""
    from traindoctor.facts.models.static import model_of

    info = model_of(ctx, call)
    return bool(info.kinds) or info.known


def key_rules_out(key: str | None, kind: str) -> bool:
    """Whether a dict key clearly names something else than ``kind`` (``"epoch"`` is no optimizer)."""
    if key is None:
        return False
    low = key.lower()
    if _RX_META_KEY.match(low):
        return True
    named = kind_from_name(low)
    if named is None and _RX_RNG.search(low):
        named = RNG_ANY
    if (named is None and _RX_MODELISH.search(low)) or low in ("state_dict", "model_state", "weights"):
        named = MODEL
    if named is None:
        return False  # a generic key such as "state" may hold anything
    if kind in RNG_KINDS:
        return named not in (RNG_ANY,)
    return named != kind


# ---------------------------------------------------------------------------------- saved content
@dataclass(frozen=True)
class Piece:
    """One thing found inside a saved object, under top-level dict key ``key`` (None: no key)."""

    kind: str
    key: str | None
    node: ast.AST


@dataclass
class Saved:
    """What one save writes: its pieces, and whether the whole object is unknown."""

    pieces: list[Piece] = field(default_factory=list)

    def kinds(self) -> set[str]:
        return {p.kind for p in self.pieces}

    def has(self, kind: str) -> bool:
        """Whether a piece of ``kind`` is certainly saved (``rng_any`` covers each RNG kind)."""
        kinds = self.kinds()
        if kind in RNG_KINDS and RNG_ANY in kinds:
            return True
        return kind in kinds

    def may_hold(self, kind: str) -> bool:
        """Whether ``kind`` is saved or may hide in an opaque piece whose key does not rule it out."""
        if self.has(kind):
            return True
        return any(p.kind == OPAQUE and not key_rules_out(p.key, kind) for p in self.pieces)

    @property
    def is_opaque(self) -> bool:
        """The whole object is unknown (not a dict or value we could read)."""
        return any(p.kind == OPAQUE and p.key is None for p in self.pieces)

    def keys_of(self, kind: str) -> list[str]:
        return sorted({p.key for p in self.pieces if p.kind == kind and p.key is not None})


@dataclass
class SaveSite:
    """One save of a checkpoint, seen from where it matters.

    ``call`` is the ``torch.save``; ``report`` is where findings go (the caller of a local helper
    when the caller decides what is saved); ``contexts`` are the nodes whose position in the
    training loop counts (the save itself, or every call of the helper function it sits in).
    """

    call: ast.Call
    report: ast.AST
    contexts: list[ast.AST]
    obj: ast.AST | None
    path: ast.AST | None
    saved: Saved
    in_training_loop: bool = False
    mid_epoch: bool = False

    @property
    def is_full(self) -> bool:
        """Holds optimizer state: a training checkpoint whatever its location."""
        return self.saved.has(OPTIMIZER)


# ---------------------------------------------------------------------------------- the index
class CheckpointIndex:
    """The checkpoint facts of one file (see the module docstring)."""

    def __init__(self, ctx: FileContext) -> None:
        self.ctx = ctx
        #: kind -> {dotted name -> constructor call} for objects the file builds.
        self.objects: dict[str, dict[str, ast.Call]] = {OPTIMIZER: {}, SCHEDULER: {}, SCALER: {}, DATA: {}}
        #: dotted names assigned from a call and named like an optimizer (``opt = build(...)``).
        self.named_optimizers: set[str] = set()
        self.sites: list[SaveSite] = []
        #: Saves that hold everything (traindoctor.checkpoint.save, accelerator.save_state, ...).
        self.complete_saves: list[ast.Call] = []
        #: Unknown saves that may hold training state (external ``save_checkpoint(model, opt)``).
        self.opaque_saves: list[ast.AST] = []
        self._save_calls = self._find_save_calls()
        self._load_calls = list(ctx.calls_to(*LOAD_FUNCS))
        self._dcp_loads = list(ctx.calls_to(*DCP_LOADS))
        if not self._save_calls and not self._load_calls and not self.complete_saves and not self._dcp_loads:
            return
        self._find_objects()
        self._find_other_saves()
        for call, obj, path in self._save_calls:
            self._add_sites(call, obj, path)

    # -------------------------------------------------------------- objects
    def _find_save_calls(self) -> list[tuple[ast.Call, ast.AST | None, ast.AST | None]]:
        ctx = self.ctx
        out: list[tuple[ast.Call, ast.AST | None, ast.AST | None]] = []
        for call in ctx.calls_to(*SAVE_FUNCS):
            out.append((call, _arg(ctx, call, "obj", 0), _arg(ctx, call, "f", 1)))
        for call in ctx.calls_to(*DCP_SAVES):
            out.append((call, _arg(ctx, call, "state_dict", 0), _arg(ctx, call, "checkpoint_id", 1)))
        for call in ctx.method_calls("save"):
            recv = dotted(call.func.value) or ""  # type: ignore[attr-defined]
            last = recv.rsplit(".", 1)[-1].lower()
            if ctx.qualname(call.func) in SAVE_FUNCS:
                continue
            if last == "accelerator":
                out.append((call, _arg(ctx, call, "obj", 0), _arg(ctx, call, "f", 1)))
            elif last == "fabric":
                out.append((call, _arg(ctx, call, "state", 1), _arg(ctx, call, "path", 0)))
        # (every wrapper's name spells "save_on_ma"; in an ASCII file, identifiers are as written)
        if not ctx.source.isascii() or "save_on_ma" in ctx.source:
            for call in ctx.of(ast.Call):
                name = _callee_name(call)
                if name in _SAVE_WRAPPERS:
                    out.append((call, _arg(ctx, call, "obj", 0), _arg(ctx, call, "f", 1)))
        self.complete_saves.extend(ctx.calls_to(*COMPLETE_SAVES))
        for method, owners in _COMPLETE_METHODS.items():
            for call in ctx.method_calls(method):
                recv = (dotted(call.func.value) or "").rsplit(".", 1)[-1].lower()  # type: ignore[attr-defined]
                if any(o in recv for o in owners):
                    self.complete_saves.append(call)
        out.sort(key=lambda t: (t[0].lineno, t[0].col_offset))
        return out

    def _find_objects(self) -> None:
        ctx = self.ctx
        for call in ctx.of(ast.Call):
            qn = ctx.qualname(call.func)
            kind = constructor_kind(qn) if qn else None
            target = _assigned_name(ctx, call)
            if kind is None:
                if (
                    target is not None
                    and kind_from_name(target) == OPTIMIZER
                    and isinstance(call.func, (ast.Name, ast.Attribute))
                ):
                    self.named_optimizers.add(target)
                continue
            if kind == SCALER and ctx.value(ctx.arg(call, "enabled")) is False:
                continue  # a scaler built disabled keeps no state worth saving
            if kind == SCHEDULER and qn and qn.split(".")[-1].startswith("create_scheduler"):
                target = _assigned_name(ctx, call, first_of_tuple=True)
            self.objects[kind].setdefault(target or f"<{kind}@{call.lineno}>", call)

    def exists(self, kind: str) -> list[tuple[str, ast.Call]]:
        """(name, constructor) of each object of ``kind`` the file builds, in source order."""
        items = sorted(self.objects.get(kind, {}).items(), key=lambda kv: (kv[1].lineno, kv[1].col_offset))
        return items

    def first_name(self, kind: str, default: str) -> str:
        for name, _ in self.exists(kind):
            if not name.startswith("<"):
                return name
        if kind == OPTIMIZER and self.named_optimizers:
            return sorted(self.named_optimizers)[0]
        return default

    def optimizer_for(self, site: SaveSite, default: str) -> str:
        """The name of the optimizer that updates the model this save writes (``optimizerG``
        for ``netG.state_dict()`` when ``optimizerG = Adam(netG.parameters())``), else
        ``default``: with two models and two optimizers, advice must name the right one."""
        models = {
            n.id for p in site.saved.pieces if p.kind == MODEL for n in ast.walk(p.node) if isinstance(n, ast.Name)
        }
        if not models:
            return default
        matches = []
        for name, call in self.exists(OPTIMIZER):
            params = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "params"), None)
            if (
                params is not None
                and not name.startswith("<")
                and models & {n.id for n in ast.walk(params) if isinstance(n, ast.Name)}
            ):
                matches.append(name)
        return matches[0] if len(matches) == 1 else default

    def classify(self, expr: ast.AST) -> str:
        """What object an expression denotes: optimizer, scheduler, scaler, data or model."""
        for _ in range(4):
            if isinstance(expr, ast.Subscript):
                expr = expr.value
                continue
            if isinstance(expr, ast.Call):
                name = _callee_name(expr) or ""
                if expr.args and re.search(r"unwrap|de_?parallel|get_model|get_state_dict|module_of", name):
                    expr = expr.args[0]
                    continue
                return kind_from_name(name) or MODEL
            break
        text = dotted(expr)
        if text is None:
            return MODEL
        while text.endswith(".module") or text.endswith("._orig_mod"):
            text = text.rsplit(".", 1)[0]
        for kind in (OPTIMIZER, SCHEDULER, SCALER, DATA):
            if text in self.objects[kind]:
                return kind
        if text in self.named_optimizers:
            return OPTIMIZER
        return kind_from_name(text) or MODEL

    # -------------------------------------------------------------- training loop
    @cached_property
    def _local_functions(self) -> dict[str, list[ast.AST]]:
        out: dict[str, list[ast.AST]] = {}
        for fn in self.ctx.of(*_FUNCS):
            out.setdefault(fn.name, []).append(fn)
        return out

    def local_target(self, call: ast.Call) -> str | None:
        """Name of the local function a call invokes (``f(...)`` or ``self.f(...)``), else None."""
        func = call.func
        if isinstance(func, ast.Name) and func.id in self._local_functions and func.id not in self.ctx.imports.names:
            return func.id
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id in ("self", "cls")
            and func.attr in self._local_functions
        ):
            return func.attr
        return None

    @cached_property
    def _local_calls(self) -> list[tuple[str, ast.Call]]:
        out = []
        for call in self.ctx.of(ast.Call):
            name = self.local_target(call)
            if name is not None:
                out.append((name, call))
        return out

    def callers_of(self, fn: ast.AST) -> list[ast.Call]:
        name = getattr(fn, "name", None)
        return [c for n, c in self._local_calls if n == name and not self.ctx.within(c, fn)]

    @cached_property
    def train_markers(self) -> list[ast.Call]:
        """``loss.backward()``, ``accelerator.backward(loss)``, ``optimizer.step()``, ``scaler.step(opt)``."""
        ctx = self.ctx
        out = list(ctx.method_calls("backward"))
        out.extend(ctx.calls_to("torch.autograd.backward"))
        for call in ctx.method_calls("step"):
            recv = call.func.value  # type: ignore[attr-defined]
            kind = self.classify(recv)
            if kind == OPTIMIZER or (kind == SCALER and call.args):
                out.append(call)
        return out

    @cached_property
    def _loops(self) -> tuple[set[int], set[int]]:
        """(ids of training loops, ids of batch loops)."""
        ctx = self.ctx
        training: set[int] = set()
        batch: set[int] = set()
        # Local functions that train (directly or through other local functions) and whether each
        # runs one step per call ("step") or loops itself ("epoch").
        level: dict[str, str] = {}
        for m in self.train_markers:
            fn = ctx.function_of(m)
            loops = ctx.enclosing_loops(m)
            if loops:
                training.update(id(l) for l in loops)
                batch.add(id(loops[0]))
            if isinstance(fn, _FUNCS):
                if not loops or level.get(fn.name) == "step":
                    level[fn.name] = "step"
                else:
                    level.setdefault(fn.name, "epoch")
        changed = True
        seen: set[int] = set()
        while changed:
            changed = False
            for name, call in self._local_calls:
                if name not in level or id(call) in seen:
                    continue
                seen.add(id(call))
                changed = True
                loops = ctx.enclosing_loops(call)
                if loops:
                    training.update(id(l) for l in loops)
                    if level[name] == "step":
                        batch.add(id(loops[0]))
                fn = ctx.function_of(call)
                if isinstance(fn, _FUNCS) and fn.name not in level:
                    level[fn.name] = "step" if (not loops and level[name] == "step") else "epoch"
        return training, batch

    @property
    def trains(self) -> bool:
        """The file builds an optimizer and runs backward / optimizer steps."""
        has_opt = bool(self.objects[OPTIMIZER]) or bool(self.named_optimizers)
        return has_opt and bool(self.train_markers)

    def in_training_loop(self, node: ast.AST) -> bool:
        training, _ = self._loops
        return any(id(l) in training for l in self.ctx.enclosing_loops(node))

    def _in_periodic_hook(self, node: ast.AST) -> bool:
        """A save in a framework hook the trainer calls every epoch or step (Lightning's
        ``on_train_epoch_end``, a ``TrainerCallback``'s ``on_epoch_end``) repeats like a save in
        the training loop: the loop is the framework's."""
        fn = self.ctx.function_of(node)
        return isinstance(fn, _FUNCS) and fn.name in _PERIODIC_HOOKS

    def mid_epoch(self, node: ast.AST) -> bool:
        _, batch = self._loops
        return any(id(l) in batch for l in self.ctx.enclosing_loops(node))

    # -------------------------------------------------------------- save sites
    def _add_sites(self, call: ast.Call, obj: ast.AST | None, path: ast.AST | None) -> None:
        ctx = self.ctx
        fn = ctx.function_of(call)
        callers: list[ast.Call] = []
        if isinstance(fn, _FUNCS) and not ctx.enclosing_loops(call):
            callers = self.callers_of(fn)
        params = _params(fn) if isinstance(fn, _FUNCS) else {}
        substituted = callers and any(
            isinstance(e, ast.Name) and e.id in params and self._is_param_only(e) for e in (obj, path)
        )
        if substituted:
            for caller in callers:
                subst = {name: _call_arg(caller, name, pos, params_is_method(fn)) for name, pos in params.items()}
                saved = self.analyze(obj, subst=subst)
                path_expr = path
                if isinstance(path, ast.Name) and path.id in subst and self._is_param_only(path):
                    path_expr = subst[path.id]
                self._append(SaveSite(call, caller, [caller], obj, path_expr, saved))
        else:
            contexts: list[ast.AST] = list(callers) if callers else [call]
            self._append(SaveSite(call, call, contexts, obj, path, self.analyze(obj)))

    def _append(self, site: SaveSite) -> None:
        site.in_training_loop = any(self.in_training_loop(c) for c in site.contexts) or self._in_periodic_hook(
            site.call
        )
        site.mid_epoch = any(self.mid_epoch(c) for c in site.contexts)
        self.sites.append(site)

    def _is_param_only(self, name: ast.Name) -> bool:
        bound = self.ctx.bindings_of(name)
        return bound is not None and all(b is None for b in bound)

    def _find_other_saves(self) -> None:
        """External calls like ``utils.save_checkpoint(model, optimizer, ...)`` may save anything."""
        ctx = self.ctx
        save_ids = {id(c) for c, _, _ in self._save_calls}
        for call in ctx.of(ast.Call):
            if id(call) in save_ids or self.local_target(call) is not None:
                continue
            name = (_callee_name(call) or "").lower()
            if not re.search(r"save|checkpoint|ckpt", name) or name in ("save_pretrained",):
                continue
            if _RX_READS_CHECKPOINT.search(name) and "save" not in name:
                continue  # ``restart_from_checkpoint(path, optimizer=...)`` reads a file, writes none
            if ctx.qualname(call.func) in COMPLETE_SAVES:
                continue
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                if self._mentions_training_state(arg):
                    self.opaque_saves.append(call)
                    break

    def _mentions_training_state(self, expr: ast.AST) -> bool:
        # ``opt = parser.parse_args()`` is a config namespace, whatever its name says
        # (``save_image(x, "%s/real.png" % opt.outf)`` saves no optimizer).
        config = self.ctx._parsed_args_names
        for node in ast.walk(expr):
            if isinstance(node, (ast.Name, ast.Attribute)):
                text = dotted(node)
                if text and text.split(".", 1)[0] in config:
                    continue
                if text and self.classify(node) in (OPTIMIZER, SCHEDULER, SCALER):
                    return True
        return False

    # -------------------------------------------------------------- content analysis
    def analyze(self, obj: ast.AST | None, subst: dict[str, ast.AST | None] | None = None) -> Saved:
        saved = Saved()
        if obj is None or obj is MISSING or obj is UNKNOWN:
            saved.pieces.append(Piece(OPAQUE, None, self.ctx.tree))
            return saved
        self._value(obj, None, saved, subst or {}, 0, top=True)
        return saved

    def _value(self, node: ast.AST, key: str | None, out: Saved, subst: dict, depth: int, top: bool = False) -> None:
        add = out.pieces.append
        if depth > 8:
            add(Piece(OPAQUE, key, node))
            return
        if key is not None and _RX_DATA_KEY.search(key.lower()):
            add(Piece(DATA, key, node))
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if k is None:
                    self._value(v, key, out, subst, depth + 1, top=top)
                else:
                    sub = k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
                    self._value(v, sub if top else key, out, subst, depth + 1)
            return
        if isinstance(node, ast.Constant) or isinstance(
            node, (ast.JoinedStr, ast.Compare, ast.BinOp, ast.UnaryOp, ast.BoolOp)
        ):
            add(Piece(META, key, node))
            return
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            for e in node.elts:
                self._value(e, key, out, subst, depth + 1)
            return
        if isinstance(node, ast.IfExp):
            self._value(node.body, key, out, subst, depth + 1, top=top)
            self._value(node.orelse, key, out, subst, depth + 1, top=top)
            return
        if isinstance(node, ast.Call):
            self._call(node, key, out, subst, depth, top)
            return
        if isinstance(node, ast.Name):
            self._name(node, key, out, subst, depth, top)
            return
        if isinstance(node, ast.Attribute):
            if node.attr == "state" and isinstance(node.value, ast.Attribute) and node.value.attr == "bit_generator":
                add(Piece(RNG_NUMPY, key, node))
                return
            text = dotted(node) or ""
            self._named_object(text, node, key, out, top)
            return
        if isinstance(node, (ast.DictComp, ast.ListComp, ast.GeneratorExp, ast.Subscript, ast.Starred)):
            found = False
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "state_dict":
                    add(Piece(self.classify(sub.func.value), key, sub))
                    found = True
            if not found:
                add(Piece(OPAQUE, key, node))
            return
        add(Piece(OPAQUE, key, node))

    def _call(self, node: ast.Call, key: str | None, out: Saved, subst: dict, depth: int, top: bool) -> None:
        add = out.pieces.append
        ctx = self.ctx
        func = node.func
        qn = ctx.qualname(func)
        if qn in RNG_GETTERS:
            add(Piece(RNG_GETTERS[qn], key, node))
            return
        if isinstance(func, ast.Attribute):
            if func.attr == "state_dict":
                add(Piece(self.classify(func.value), key, node))
                return
            if func.attr in ("get_state", "getstate", "get_rng_state"):
                add(Piece(RNG_ANY, key, node))
                return
        name = _callee_name(node) or ""
        if name in _DCP_GETTERS and (qn or "").startswith("torch.distributed.checkpoint"):
            kinds = _DCP_GETTERS[name]
            if name == "get_state_dict" and len(node.args) < 2 and not node.keywords:
                kinds = (MODEL,)
            for kind in kinds:
                add(Piece(kind, key, node))
            return
        if name == "dict" and not node.args:
            for kw in node.keywords:
                if kw.arg is None:
                    self._value(kw.value, key, out, subst, depth + 1, top=top)
                else:
                    self._value(kw.value, kw.arg if top else key, out, subst, depth + 1)
            return
        if name in _PASS_THROUGH_CALLS:
            if isinstance(func, ast.Attribute) and name in _RECEIVER_METHODS:
                inner = func.value  # ``model.to(device)`` is the model, not the device
            else:
                inner = node.args[0] if node.args else (func.value if isinstance(func, ast.Attribute) else None)
            if inner is not None:
                self._value(inner, key, out, subst, depth + 1, top=top)
                return
        if name in _HARMLESS_CALLS:
            add(Piece(META, key, node))
            return
        if re.search(r"get_state_dict|unwrap|de_?parallel", name) and node.args:
            add(Piece(self.classify(node), key, node))
            return
        if top and _builds_model(ctx, node):
            add(Piece(MODEL, key, node))  # ``torch.save(model, path)``: the whole module, pickled
            return
        # An unknown call: state_dict() calls inside still tell us something; the rest is opaque.
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and sub.func.attr == "state_dict":
                add(Piece(self.classify(sub.func.value), key, sub))
        if key is not None and _RX_RNG.search(key.lower()):
            add(Piece(RNG_ANY, key, node))
        add(Piece(OPAQUE, key, node))

    def _name(self, node: ast.Name, key: str | None, out: Saved, subst: dict, depth: int, top: bool) -> None:
        ctx = self.ctx
        if node.id in subst and self._is_param_only(node):
            replacement = subst[node.id]
            if replacement is None:
                out.pieces.append(Piece(OPAQUE, key, node))
            else:
                self._value(replacement, key, out, {}, depth + 1, top=top)
            self._mutations(node, key, out, subst, depth, top)
            return
        bound, since = self.reaching(node)
        if bound and any(b is not None for b in bound):
            for b in bound:
                if b is not None:
                    self._value(b, key, out, subst, depth + 1, top=top)
            if any(b is None for b in bound):
                # Also rebound where we cannot see the value (loop target, parameter, ``+=``).
                self._named_object(node.id, node, key, out, top)
            self._mutations(node, key, out, subst, depth, top, since)
            return
        unpacked = self._dcp_unpacked.get((id(ctx.scope_of(node)), node.id))
        if unpacked is not None and bound and all(b is None for b in bound):
            out.pieces.append(Piece(unpacked, key, node))
        else:
            self._named_object(node.id, node, key, out, top)
        if bound:
            self._mutations(node, key, out, subst, depth, top, since)

    @cached_property
    def _dcp_unpacked(self) -> dict[tuple[int, str], str]:
        """``model_sd, optim_sd = get_state_dict(model, optimizer)``: what each name holds."""
        ctx = self.ctx
        out: dict[tuple[int, str], str] = {}
        for node in ctx.of(ast.Assign):
            value = node.value  # type: ignore[attr-defined]
            if not (
                isinstance(value, ast.Call)
                and _callee_name(value) == "get_state_dict"
                and (ctx.qualname(value.func) or "").startswith("torch.distributed.checkpoint")
            ):
                continue
            for target in node.targets:  # type: ignore[attr-defined]
                if isinstance(target, (ast.Tuple, ast.List)) and len(target.elts) == 2:
                    for elt, kind in zip(target.elts, (MODEL, OPTIMIZER)):
                        if isinstance(elt, ast.Name):
                            out[(id(ctx.scope_of(node)), elt.id)] = kind
        return out

    def reaching(self, name: ast.Name) -> tuple[list[ast.expr | None] | None, tuple[int, int] | None]:
        """The bindings of ``name`` that may reach this use, and where the dominating one starts.

        A plain assignment in a block that leads to the use (``checkpoint = {...}`` in the epoch
        loop, before ``torch.save(checkpoint, ...)``) hides earlier ones such as
        ``checkpoint = torch.load(args.resume)`` in the resume branch. Rebindings after the use
        inside a loop around it still count: they reach the next iteration.
        """
        ctx = self.ctx
        bound = ctx.bindings_of(name)
        if not bound:
            return bound, None
        use_pos = (name.lineno, name.col_offset)
        use_blocks = self._block_positions(ctx.statement_of(name))
        best: ast.expr | None = None
        for b in bound:
            if b is None or _pos(b) >= use_pos:
                continue
            where = self._block_position(ctx.statement_of(b))
            if where is not None and where[0] in use_blocks and where[1] < use_blocks[where[0]]:
                if best is None or _pos(b) > _pos(best):
                    best = b
        if best is None:
            return bound, None
        since = _pos(best)
        loops = [l for l in ctx.enclosing_loops(name) if not ctx.within(best, l)]
        kept: list[ast.expr | None] = []
        for b in bound:
            if b is None:
                continue
            if since <= _pos(b) < use_pos or any(ctx.within(b, l) for l in loops):
                kept.append(b)
        return kept, since

    def _block_position(self, stmt: ast.AST) -> tuple[tuple[int, str], int] | None:
        parent = self.ctx.parent(stmt)
        if parent is None:
            return None
        for fname, value in ast.iter_fields(parent):
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is stmt:
                        return (id(parent), fname), i
        return None

    def _block_positions(self, stmt: ast.AST) -> dict[tuple[int, str], int]:
        """Block -> index of the statement on the path from ``stmt`` up to its scope."""
        out: dict[tuple[int, str], int] = {}
        cur: ast.AST | None = stmt
        while cur is not None and not isinstance(cur, (ast.Module, *_FUNCS, ast.ClassDef, ast.Lambda)):
            if isinstance(cur, ast.stmt):
                where = self._block_position(cur)
                if where is not None:
                    out[where[0]] = where[1]
            cur = self.ctx.parent(cur)
        return out

    def _named_object(self, text: str, node: ast.AST, key: str | None, out: Saved, top: bool) -> None:
        """A name we cannot follow: judge it by what the file built under it, else by its name."""
        add = out.pieces.append
        for kind in (OPTIMIZER, SCHEDULER, SCALER, DATA):
            if text in self.objects[kind]:
                add(Piece(kind, key, node))
                return
        last = text.rsplit(".", 1)[-1].lower()
        named = kind_from_name(last)
        if named is not None:
            add(Piece(named, key, node))
        elif _RX_RNG.search(last):
            add(Piece(RNG_ANY, key, node))
        elif _RX_MODELISH.search(last):
            add(Piece(MODEL, key, node))
        elif _RX_GENERIC_STATE.search(last):
            add(Piece(OPAQUE, key, node))
        elif top and not _RX_DATAISH.search(last):
            add(Piece(OPAQUE, key, node))
        else:
            add(Piece(META, key, node))

    def _mutations(
        self,
        node: ast.Name,
        key: str | None,
        out: Saved,
        subst: dict,
        depth: int,
        top: bool,
        since: tuple[int, int] | None = None,
    ) -> None:
        """Items stored into a dict variable in its scope: ``d["k"] = v``, ``d.update(...)``, escapes.

        ``since``: where the binding that reaches the save starts; stores before it went into an
        earlier object bound to the same name.
        """
        ctx = self.ctx
        scope = ctx.scope_of(node)
        for use in self._name_uses.get(node.id, ()):
            if use is node or ctx.scope_of(use) is not scope:
                continue
            if since is not None and _pos(use) < since:
                continue
            parent = ctx.parent(use)
            if isinstance(parent, ast.Subscript) and parent.value is use:
                if isinstance(parent.ctx, ast.Store):
                    stmt = ctx.parent(parent)
                    value = getattr(stmt, "value", None)
                    k = parent.slice
                    sub = k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
                    if value is None:
                        out.pieces.append(Piece(OPAQUE, sub if top else key, parent))
                    else:
                        self._value(value, sub if top else key, out, subst, depth + 1)
                continue
            if isinstance(parent, ast.Attribute) and parent.value is use:
                call = ctx.parent(parent)
                if parent.attr in ("update", "setdefault") and isinstance(call, ast.Call) and call.func is parent:
                    if parent.attr == "update":
                        for a in call.args:
                            self._value(a, key, out, subst, depth + 1, top=top)
                        for kw in call.keywords:
                            self._value(
                                kw.value,
                                (kw.arg if top else key) if kw.arg else key,
                                out,
                                subst,
                                depth + 1,
                                top=top and kw.arg is None,
                            )
                    elif len(call.args) == 2:
                        k = call.args[0]
                        sub = k.value if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
                        self._value(call.args[1], sub if top else key, out, subst, depth + 1)
                continue
            if (isinstance(parent, ast.Call) and use in parent.args) or isinstance(parent, ast.keyword):
                call = parent if isinstance(parent, ast.Call) else ctx.parent(parent)
                if isinstance(call, ast.Call) and not self._benign_consumer(call):
                    out.pieces.append(Piece(OPAQUE, key, call))

    def _benign_consumer(self, call: ast.Call) -> bool:
        """Calls that read a checkpoint dict without adding to it (the save itself, printing...)."""
        qn = self.ctx.qualname(call.func)
        if qn in SAVE_FUNCS or qn in LOAD_FUNCS:
            return True
        if self.local_target(call) is not None:
            return True
        name = _callee_name(call) or ""
        return (
            name
            in (
                "print",
                "len",
                "isinstance",
                "info",
                "debug",
                "warning",
                "log",
                "save",
                "keys",
                "items",
                "values",
                "sorted",
                "list",
                "load_state_dict",
                "update",
            )
            or name in _SAVE_WRAPPERS
        )

    @cached_property
    def _name_uses(self) -> dict[str, list[ast.Name]]:
        out: dict[str, list[ast.Name]] = {}
        for n in self.ctx.of(ast.Name):
            out.setdefault(n.id, []).append(n)
        return out

    # -------------------------------------------------------------- file-level view
    def may_hold_anywhere(self, kind: str) -> bool:
        """Whether any save in the file holds (or may hold) ``kind``."""
        if self.complete_saves:
            return True
        if kind in (OPTIMIZER, SCHEDULER, SCALER) and self.opaque_saves:
            return True
        if kind in RNG_KINDS and self.opaque_saves:
            return True
        if kind == SCHEDULER and self._schedule_position_set_by_hand:
            return True
        return any(s.saved.may_hold(kind) for s in self.sites)

    @cached_property
    def _schedule_position_set_by_hand(self) -> bool:
        """``scheduler.last_epoch = start_epoch - 1``: the schedule is restored from the epoch."""
        for node in self.ctx.of(ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Attribute) and t.attr == "last_epoch" and self.classify(t.value) == SCHEDULER:
                    return True
        return False

    def optimizers_are_stateless(self) -> bool:
        """Every optimizer the file builds is plain SGD without momentum: it keeps no per-parameter
        state (no momentum buffer, no moments), so a checkpoint without it loses nothing."""
        built = self.objects[OPTIMIZER]
        if self.named_optimizers or not built:
            return False
        for call in built.values():
            if self.ctx.qualname(call.func) != "torch.optim.SGD":
                return False
            if self.ctx.arg_value(call, "momentum", default=0, qualname="torch.optim.SGD") != 0:
                return False
        return True

    @cached_property
    def in_test_code(self) -> bool:
        """A test module (``test_*.py``, ``*_test.py``): its saves are fixtures that check a
        save/load round trip, not checkpoints a training run resumes from. Judged by the file's
        own name only: training scripts kept under a ``tests/`` folder as fixtures still count."""
        from traindoctor.facts.data.static import is_test_module

        return is_test_module(self.ctx.filename)

    def model_only_in_loop(self) -> list[SaveSite]:
        """Model-weight saves in the training loop of a training file with no optimizer state
        saved anywhere, that are checkpoints rather than exports (see ``traindoctor.facts.checkpoint.kinds``)."""
        if not self.trains or self.may_hold_anywhere(OPTIMIZER) or self.in_test_code:
            return []
        from traindoctor.facts.checkpoint.kinds import CHECKPOINT

        return self._first_of_repeats(
            [
                s
                for s in self.sites
                if s.in_training_loop
                and s.saved.has(MODEL)
                and not s.saved.may_hold(OPTIMIZER)
                and self.save_kind(s) == CHECKPOINT
            ]
        )

    # -------------------------------------------------------------- checkpoint or export
    def save_kind(self, site: SaveSite) -> str:
        """``"checkpoint"`` or ``"export"`` (the shared definition in ``traindoctor.facts.checkpoint.kinds``)."""
        from traindoctor.facts.checkpoint.kinds import save_kind

        return save_kind(self.save_facts(site))

    def save_facts(self, site: SaveSite) -> SaveFacts:
        from traindoctor.facts.checkpoint.kinds import SaveFacts, export_name, quality_guard

        saved = site.saved
        resume_kinds = (OPTIMIZER, SCHEDULER, SCALER, DATA, RNG_ANY, *RNG_KINDS)
        holds = any(saved.has(k) for k in resume_kinds) or any(
            p.key is not None and _RX_COUNTER_KEY.match(p.key.lower()) for p in saved.pieces
        )
        guard_names: list[str] = []
        for node in site.contexts:
            guard_names.extend(self._guard_names(node))
        return SaveFacts(
            holds_resume_state=holds,
            read_back=self._read_back(site),
            quality_guarded=quality_guard(guard_names) or any(self._running_best_guard(node) for node in site.contexts),
            export_name=export_name(self._path_words(site.path)),
            in_training_loop=site.in_training_loop,
        )

    def _guard_names(self, node: ast.AST) -> list[str]:
        """Names read by the tests of the ``if`` statements whose body holds ``node``."""
        ctx = self.ctx
        names: list[str] = []
        child = node
        for anc in ctx.ancestors(node):
            if isinstance(anc, _FUNCS):
                break
            if isinstance(anc, ast.If) and any(child is b for b in anc.body):
                for sub in ast.walk(anc.test):
                    if isinstance(sub, ast.Name):
                        names.append(sub.id)
                    elif isinstance(sub, ast.Attribute):
                        names.append(sub.attr)
            child = anc
        return names

    def _running_best_guard(self, node: ast.AST) -> bool:
        """``node`` runs under a "better than the best so far" test by its shape, whatever the
        names: ``if score > top_score: top_score = score`` (an ``if`` comparing two values whose
        body stores the one into the other), as in ``if not best or val_loss < best: ...``."""
        child = node
        for anc in self.ctx.ancestors(node):
            if isinstance(anc, _FUNCS):
                break
            if isinstance(anc, ast.If) and any(child is b for b in anc.body):
                pairs = set()
                for sub in ast.walk(anc.test):
                    if (
                        isinstance(sub, ast.Compare)
                        and len(sub.ops) == 1
                        and isinstance(sub.ops[0], (ast.Lt, ast.Gt, ast.LtE, ast.GtE))
                    ):
                        a, b = _value_key(sub.left), _value_key(sub.comparators[0])
                        if a and b:
                            pairs.update({(a, b), (b, a)})
                if pairs:
                    for stmt in anc.body:
                        for sub in ast.walk(stmt):
                            if isinstance(sub, ast.Assign) and len(sub.targets) == 1:
                                if (_value_key(sub.targets[0]), _value_key(sub.value)) in pairs:
                                    return True
            child = anc
        return False

    def _path_words(self, path: ast.AST | None) -> list[str]:
        if path is None or path is MISSING or path is UNKNOWN:
            return []
        words: list[str] = []
        value = self.ctx.value(path)
        if isinstance(value, str):
            words.append(value)
        for sub in ast.walk(path):
            if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                words.append(sub.value)
            elif isinstance(sub, ast.Name):
                words.append(sub.id)
            elif isinstance(sub, ast.Attribute):
                words.append(sub.attr)
        return words

    def _read_back(self, site: SaveSite) -> bool:
        """A resume path reads this save back: a ``torch.load`` of the same file that is not a
        read of the finished result after the training loop."""
        if not self._load_calls:
            return False
        ctx = self.ctx
        saved_keys = self.path_keys(site.path, site.call)
        if not saved_keys:
            return False
        for call in self._load_calls:
            if self._after_training_loop(call, site):
                continue
            if saved_keys & self.path_keys(_arg(ctx, call, "f", 0), call):
                return True
        return False

    def training_checkpoints(self) -> list[SaveSite]:
        """Saves that are training checkpoints: with optimizer state, or TD501's model-only ones."""
        if self.complete_saves or self.in_test_code:
            return []
        full = [s for s in self.sites if s.is_full]
        return self._first_of_repeats(full + self.model_only_in_loop())

    def _first_of_repeats(self, sites: list[SaveSite]) -> list[SaveSite]:
        """Sites in source order, keeping only the first save of one object saved again nearby.

        ``save(ckpt, "last.pth")`` followed by ``save(ckpt, f"ep{epoch}.pth")`` writes one dict
        twice: one mistake, so one finding (at the first save). Two saves count as the same
        object when both save the same name, bound by the same assignment, in the same function
        and the same loops (a save in an ``if`` beside the first still counts).
        """
        ordered = sorted(sites, key=lambda s: (s.report.lineno, s.report.col_offset))  # type: ignore[attr-defined]
        seen: set[tuple] = set()
        out: list[SaveSite] = []
        for site in ordered:
            key = self._saved_object_key(site)
            if key is not None and key in seen:
                continue
            if key is not None:
                seen.add(key)
            out.append(site)
        return out

    def _saved_object_key(self, site: SaveSite) -> tuple | None:
        """What identifies the object a save writes, or None when it is not one plain name."""
        obj = site.obj
        if site.report is not site.call or not isinstance(obj, ast.Name):
            return None
        ctx = self.ctx
        bound, since = self.reaching(obj)
        if not bound or any(b is None for b in bound):
            return None
        binding = since if since is not None else tuple(_pos(b) for b in bound if b is not None)
        loops = tuple(id(l) for l in ctx.enclosing_loops(site.call))
        return (obj.id, id(ctx.scope_of(obj)), binding, loops)

    @property
    def load_calls(self) -> list[ast.Call]:
        return self._load_calls

    # -------------------------------------------------------------- resume (TD503, TD504, TD505)
    def kept_on_resume(self, kind: str) -> bool:
        """Whether a resumed run can get ``kind`` back: some save may hold it, and the resume
        path, when the file has one, restores it.

        A resume path makes a missing state *more* certain: ``iter_num = ckpt["iter_num"]`` puts
        opaque values into the next save (so the save "may hold" anything), but the resume code
        says exactly what comes back, and a state it never restores is lost whatever is saved.
        """
        if not self.may_hold_anywhere(kind):
            return False
        if self.complete_saves or self.opaque_saves or any(s.saved.has(kind) for s in self.sites):
            return True  # saved for sure, or nothing is known: whether resume restores it is TD505's
        return not self.resume_misses(kind)

    def resume_misses(self, kind: str) -> bool:
        """Whether the file resumes (restores its model or optimizer from a checkpoint it loads)
        and never restores ``kind``: no ``<kind>.load_state_dict``, no read of a key that names
        it, and for RNG kinds no ``set_rng_state``/``setstate``/``set_state`` anywhere."""
        ctx = self.ctx
        if not self._load_calls or self.complete_saves or ctx.calls_to(*COMPLETE_LOADS):
            return False
        loads = ctx.method_calls("load_state_dict")
        if any(self.classify(c.func.value) == kind for c in loads):  # type: ignore[attr-defined]
            return False
        resumes = False
        for call in loads:
            if self.classify(call.func.value) in (MODEL, OPTIMIZER):  # type: ignore[attr-defined]
                arg = _arg(ctx, call, "state_dict", 0)
                if arg is not None and self._reads_loaded_checkpoint(arg):
                    resumes = True
                    break
        if not resumes:
            return False
        if kind in RNG_KINDS or kind == RNG_ANY:
            for attr in ("set_rng_state", "set_rng_state_all", "setstate", "set_state"):
                if ctx.method_calls(attr) or any(q.endswith("." + attr) for q in ctx.called_names):
                    return False
            return True
        for sub in ctx.of(ast.Subscript):
            if isinstance(sub.slice, ast.Constant) and isinstance(sub.slice.value, str):
                if not key_rules_out(sub.slice.value, kind) and kind_from_name(sub.slice.value.lower()) == kind:
                    return False
        for attr in ("get", "pop"):
            for call in ctx.method_calls(attr):
                if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
                    if kind_from_name(call.args[0].value.lower()) == kind:
                        return False
        return True

    def _reads_loaded_checkpoint(self, arg: ast.AST) -> bool:
        """``ckpt["model"]`` / ``ckpt.get("model")`` (or a name bound to it) where some binding of
        ``ckpt`` is a ``torch.load(...)``: the state comes from a checkpoint the file loads."""
        ctx = self.ctx
        for _ in range(4):
            if isinstance(arg, ast.Name):
                bound = [b for b in ctx.bindings_of(arg) or () if b is not None]
                if not bound:
                    return False
                arg = bound[0]
            elif isinstance(arg, ast.Subscript):
                arg = arg.value
            elif isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "get":
                arg = arg.func.value
            else:
                break
            if isinstance(arg, ast.Call) and ctx.qualname(arg.func) in LOAD_FUNCS:
                return True
        return False

    def resume_gaps(self) -> list[tuple[ast.Call, list[tuple[str, str]]]]:
        """Model restores from a loaded checkpoint that skip state the file saves beside the model.

        Returns ``(model.load_state_dict call, [(kind, saved key), ...])``. A saved piece counts as
        restored when any ``<object of that kind>.load_state_dict`` exists in the file or its key
        is read anywhere (``ckpt["optimizer"]``, ``ckpt.get("optimizer")``): a generous reading,
        so only a resume that plainly ignores the saved state is reported.
        """
        ctx = self.ctx
        if self.complete_saves or ctx.calls_to(*COMPLETE_LOADS):
            return []
        dcp_gaps = self._dcp_resume_gaps()
        if not self._load_calls:
            return dcp_gaps
        loads = ctx.method_calls("load_state_dict")
        restored = {self.classify(c.func.value) for c in loads}  # type: ignore[attr-defined]
        read_keys: set[str] = set()
        for sub in ctx.of(ast.Subscript):
            if (
                isinstance(sub.ctx, ast.Load)
                and isinstance(sub.slice, ast.Constant)
                and isinstance(sub.slice.value, str)
            ):
                read_keys.add(sub.slice.value)
        for attr in ("get", "pop"):
            for call in ctx.method_calls(attr):
                if call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
                    read_keys.add(call.args[0].value)
        out: list[tuple[ast.Call, list[tuple[str, str]]]] = []
        for call in loads:
            if self.classify(call.func.value) != MODEL:  # type: ignore[attr-defined]
                continue
            arg = _arg(ctx, call, "state_dict", 0)
            key = self._loaded_key(arg) if arg is not None else None
            if key is None:
                continue
            gaps: set[tuple[str, str]] = set()
            for site in self.sites:
                if key not in site.saved.keys_of(MODEL) or site.saved.is_opaque:
                    continue
                if self._after_training_loop(call, site):
                    continue  # reading the result back for evaluation, not resuming
                for kind in (OPTIMIZER, SCHEDULER, SCALER):
                    if kind in restored:
                        continue
                    gaps.update((kind, k) for k in site.saved.keys_of(kind) if k not in read_keys)
            if gaps:
                out.append((call, sorted(gaps)))
        return out + dcp_gaps

    def _dcp_resume_gaps(self) -> list[tuple[ast.Call, list[tuple[str, str]]]]:
        """``dcp.load({"model": ...})`` where a DCP save of this file also holds optimizer state.

        DCP fills only the keys of the dict it is given, so a load dict without the saved
        optimizer/scheduler/scaler keys restores the model alone. Silent when the load dict
        cannot be read or the state is restored some other way.
        """
        ctx = self.ctx
        out: list[tuple[ast.Call, list[tuple[str, str]]]] = []
        dcp_sites = [s for s in self.sites if ctx.qualname(s.call.func) in DCP_SAVES and not s.saved.is_opaque]
        if not dcp_sites:
            return out
        restored = {self.classify(c.func.value) for c in ctx.method_calls("load_state_dict")}  # type: ignore[attr-defined]
        if ctx.calls_to("torch.distributed.checkpoint.state_dict.set_optimizer_state_dict"):
            restored.add(OPTIMIZER)
        for call in ctx.calls_to("torch.distributed.checkpoint.state_dict.set_state_dict"):
            optim = ctx.arg(call, "optim_state_dict")
            if not (isinstance(optim, ast.Dict) and not optim.keys):
                restored.add(OPTIMIZER)
        for call in self._dcp_loads:
            loaded = self._dict_keys(_arg(ctx, call, "state_dict", 0))
            if loaded is None:
                continue
            gaps: set[tuple[str, str]] = set()
            for site in dcp_sites:
                if not set(site.saved.keys_of(MODEL)) & loaded:
                    continue
                for kind in (OPTIMIZER, SCHEDULER, SCALER):
                    if kind not in restored:
                        gaps.update((kind, k) for k in site.saved.keys_of(kind) if k not in loaded)
            if gaps:
                out.append((call, sorted(gaps)))
        return out

    def _dict_keys(self, expr: ast.AST | None) -> set[str] | None:
        """The string keys of a dict literal (followed through one plain name), else None."""
        if isinstance(expr, ast.Name):
            bound = self.ctx.bindings_of(expr)
            if not bound or len(bound) != 1 or bound[0] is None:
                return None
            expr = bound[0]
        if not isinstance(expr, ast.Dict) or any(k is None for k in expr.keys):
            return None
        keys = {k.value for k in expr.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        return keys if len(keys) == len(expr.keys) else None

    def _loaded_key(self, arg: ast.AST) -> str | None:
        """``"model"`` for ``ckpt["model"]`` / ``ckpt.get("model")`` where ``ckpt = torch.load(...)``."""
        ctx = self.ctx
        for _ in range(3):
            if isinstance(arg, ast.Name):
                bound = ctx.bindings_of(arg)
                if not bound or len(bound) != 1 or bound[0] is None:
                    return None
                arg = bound[0]
                continue
            break
        if isinstance(arg, ast.Subscript) and isinstance(arg.slice, ast.Constant) and isinstance(arg.slice.value, str):
            base, key = arg.value, arg.slice.value
        elif (
            isinstance(arg, ast.Call)
            and isinstance(arg.func, ast.Attribute)
            and arg.func.attr == "get"
            and arg.args
            and isinstance(arg.args[0], ast.Constant)
            and isinstance(arg.args[0].value, str)
        ):
            base, key = arg.func.value, arg.args[0].value
        else:
            return None
        if isinstance(base, ast.Call):
            return key if ctx.qualname(base.func) in LOAD_FUNCS else None
        if not isinstance(base, ast.Name):
            return None
        bound = ctx.bindings_of(base)
        if not bound or len(bound) != 1 or not isinstance(bound[0], ast.Call):
            return None
        if ctx.qualname(bound[0].func) not in LOAD_FUNCS:
            return None
        # The loaded dict handed to an unknown function may be restored there: stay silent.
        scope = ctx.scope_of(base)
        for use in self._name_uses.get(base.id, ()):
            if ctx.scope_of(use) is not scope:
                continue
            parent = ctx.parent(use)
            call = (
                parent
                if isinstance(parent, ast.Call)
                else ctx.parent(parent)
                if isinstance(parent, ast.keyword)
                else None
            )
            if isinstance(call, ast.Call) and call.func is not use and not self._benign_consumer(call):
                return None
        return key

    def _after_training_loop(self, node: ast.AST, site: SaveSite) -> bool:
        """Whether ``node`` comes after a loop around the save, in the same function.

        Such a load reads the finished result back (evaluation, export); resume reads happen
        before the training loop or in a function of their own.
        """
        ctx = self.ctx
        scope = ctx.scope_of(node)
        for c in site.contexts:
            for loop in ctx.enclosing_loops(c):
                if ctx.scope_of(loop) is scope and _pos(node) > _end(loop):
                    return True
        return False

    # -------------------------------------------------------------- overwrite (TD507)
    def overwritten_resume_files(self) -> list[SaveSite]:
        """Saves in the training loop straight onto a file that a ``torch.load`` in the file reads."""
        if not self._load_calls:
            return []
        ctx = self.ctx
        loads = [(call, self.path_keys(_arg(ctx, call, "f", 0), call)) for call in self._load_calls]
        out = []
        for site in self.sites:
            if not site.in_training_loop or site.saved.kinds() <= {META} or _is_temp_path(site.path):
                continue
            at = site.contexts[0]
            keys = self.path_keys(site.path, at)
            if not keys:
                continue
            # A load in the same loop as the save reads back what was just written (a round trip
            # in a test, an evaluation of the new file), not the file a restarted run resumes from.
            loop_ids = {id(l) for c in site.contexts for l in ctx.enclosing_loops(c)}
            for call, load_keys in loads:
                if not keys & load_keys or any(id(l) in loop_ids for l in ctx.enclosing_loops(call)):
                    continue
                if self._after_training_loop(call, site):
                    continue
                out.append(site)
                break
        return out

    # -------------------------------------------------------------- paths (TD507)
    def path_keys(self, expr: ast.AST | None, at: ast.AST) -> set[tuple]:
        """Keys identifying the file a path expression names; shared keys mean the same file."""
        if expr is None or expr is MISSING or expr is UNKNOWN:
            return set()
        ctx = self.ctx
        keys: set[tuple] = set()
        node = expr
        for _ in range(3):
            if isinstance(node, ast.Name):
                bound = ctx.bindings_of(node)
                if bound and len(bound) == 1 and bound[0] is not None:
                    node = bound[0]
                    continue
                if bound:
                    keys.add(("name", id(ctx.scope_of(node)), node.id))
                return keys | self._basename_keys(expr, at)
            break
        value = ctx.value(node)
        if isinstance(value, str):
            keys.add(("const", value))
        elif not isinstance(node, ast.Name):
            keys.add(("expr", ast.dump(node, annotate_fields=False, include_attributes=False)))
        return keys | self._basename_keys(node, at)

    def _basename_keys(self, expr: ast.AST, at: ast.AST) -> set[tuple]:
        ctx = self.ctx
        loop_vars = set()
        for loop in ctx.enclosing_loops(at):
            for n in ast.walk(loop.target) if isinstance(loop, (ast.For, ast.AsyncFor)) else ():  # type: ignore[attr-defined]
                if isinstance(n, ast.Name):
                    loop_vars.add(n.id)
        out: set[tuple] = set()
        for n in ast.walk(expr):
            if isinstance(n, ast.Name) and n.id in loop_vars:
                return set()  # a new file per epoch/step does not overwrite the one resume reads
            if isinstance(n, ast.Constant) and isinstance(n.value, str):
                base = os.path.basename(n.value)
                if _RX_CKPT_FILE.match(base) and "{" not in base:
                    out.add(("base", base))
        return out


def constructor_kind(qn: str) -> str | None:
    """Which training object a constructor builds, by its qualified name."""
    last = qn.rsplit(".", 1)[-1]
    if qn in SCALER_CTORS:
        return SCALER
    if qn.startswith("torch.optim.lr_scheduler.") and last[:1].isupper() and last != "LRScheduler":
        return SCHEDULER
    if qn.startswith(("transformers.", "diffusers.")) and last.startswith("get_") and "schedule" in last:
        return SCHEDULER
    if qn.startswith("timm.scheduler.") and (last.startswith("create_scheduler") or last.endswith("Scheduler")):
        return SCHEDULER
    if qn in OPTIMIZERS or (qn.startswith(_OTHER_OPTIMIZERS) and last[:1].isupper()):
        return OPTIMIZER
    if qn.startswith("torch.optim.") and last[:1].isupper() and last not in ("Optimizer",) and "lr_scheduler" not in qn:
        return OPTIMIZER
    if qn.startswith(_OPTIMIZER_PREFIXES) and (last[:1].isupper() or last.startswith("create_optimizer")):
        return OPTIMIZER
    if qn in SAMPLER_CTORS or qn.startswith("torchdata.stateful_dataloader."):
        return DATA
    return None


# ---------------------------------------------------------------------------------- helpers
def _arg(ctx: FileContext, call: ast.Call, name: str, pos: int) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if len(call.args) > pos and not any(isinstance(a, ast.Starred) for a in call.args[: pos + 1]):
        return call.args[pos]
    return None


def _pos(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _end(node: ast.AST) -> tuple[int, int]:
    return (getattr(node, "end_lineno", 0) or 0, getattr(node, "end_col_offset", 0) or 0)


def _value_key(node: ast.AST) -> str | None:
    """Source text of a name, attribute or subscript (``best``, ``self.best_acc``), else None."""
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        try:
            return ast.unparse(node)
        except Exception:  # pragma: no cover - unparse of a valid tree
            return None
    return None


def _is_temp_path(path: ast.AST | None) -> bool:
    """A path built from a temporary file or directory (``tmp.name``, ``tempfile.mkstemp()``)."""
    if path is None or path is MISSING or path is UNKNOWN:
        return False
    for node in ast.walk(path):
        text = dotted(node) if isinstance(node, (ast.Name, ast.Attribute)) else None
        if text and re.search(r"(^|[._])(tmp|temp|tempfile)", text.lower()):
            return True
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and re.search(r"\.(tmp|temp)$|^/tmp/", node.value)
        ):
            return True
    return False


def _callee_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _assigned_name(ctx: FileContext, call: ast.Call, first_of_tuple: bool = False) -> str | None:
    parent = ctx.parent(call)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
        for t in targets:
            if isinstance(t, ast.Tuple) and first_of_tuple and t.elts:
                t = t.elts[0]
            text = dotted(t)
            if text is not None:
                return text
    return None


def _params(fn: ast.AST) -> dict[str, int]:
    """Parameter name -> positional index (keyword-only parameters get -1)."""
    a = fn.args  # type: ignore[attr-defined]
    out: dict[str, int] = {}
    for i, p in enumerate([*a.posonlyargs, *a.args]):
        out[p.arg] = i
    for p in a.kwonlyargs:
        out[p.arg] = -1
    return out


def params_is_method(fn: ast.AST) -> bool:
    a = fn.args  # type: ignore[attr-defined]
    first = [*a.posonlyargs, *a.args][:1]
    return bool(first) and first[0].arg in ("self", "cls")


def _call_arg(call: ast.Call, name: str, pos: int, method: bool) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if pos < 0:
        return None
    if method:
        pos -= 1
    if pos < 0:
        return None
    if any(isinstance(a, ast.Starred) for a in call.args[: pos + 1]):
        return None
    return call.args[pos] if len(call.args) > pos else None


def file_draws(ctx: FileContext) -> set[str]:
    """The RNGs a file draws from: torch CPU always, CUDA when it targets CUDA, NumPy, ``random``."""
    out = {RNG_CPU}
    if ctx.targets_cuda:
        out.add(RNG_CUDA)
    for qn, _ in ctx.calls_to_prefix("numpy.random."):
        if qn.split(".")[2] not in _NUMPY_NON_DRAWS:
            out.add(RNG_NUMPY)
            break
    for qn, _ in ctx.calls_to_prefix("random."):
        if qn.count(".") == 1 and qn.split(".")[1] not in _PYTHON_NON_DRAWS:
            out.add(RNG_PYTHON)
            break
    return out


def checkpoint_index(ctx: FileContext) -> CheckpointIndex:
    """The (cached) checkpoint index of a file."""
    return ctx.shared("checkpoints", CheckpointIndex)
