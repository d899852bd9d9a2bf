"""Pattern finders for ``seeded_mistakes.py``: places in real training code where a practice is done
right, and the one minimal edit that turns each into the mistake a rule of the catalog reports.

Every finder reads the parsed modules of one repository (``Project``) and yields ``Seed``\\ s: the
edit, the place where the finding is expected (the function around the edit; for a loader, the
``DataLoader(...)`` call; extra ``anchors`` where the catalog places the finding elsewhere, e.g.
TD601 at the sampler's construction) and whether the case is single-file (what the rule needs to
see is in the edited file) or cross-file (the edit is in another module than where the finding
must be reported or the evidence lives: a loader built in a helper module and trained on
elsewhere, a checkpoint helper that receives the optimizer as a parameter, a model whose
BatchNorm/Dropout layers are defined in another module).

A finder only proposes a seed that is a real instance of the mistake once edited; the rules it
follows are in each finder's docstring, and ``seeded_review.md`` records the review of a sample.
Unit tests, documentation and ``setup.py`` are never seeded; only ``.py`` files are.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property

from seed_syntax import (
    NO_GRAD,
    OPTIMIZER_CALLS,
    SCALER_CALLS,
    SCHEDULER_CALLS,
    Edit,
    Module,
    is_eval_name,
    is_test_or_demo,
    is_train_name,
    last_name,
    node_edit,
    role,
    text,
)

SINGLE, CROSS = "single-file", "cross-file"
Span = tuple[str, int, int]


@dataclass(frozen=True)
class Seed:
    """One minimal edit that introduces one mistake."""

    kind: str
    file: str
    edit: Edit
    place: tuple[int, int]
    scope: str
    anchors: tuple[Span, ...] = ()

    @property
    def line(self) -> int:
        """The first edited line: with repository, commit, file and kind, the seed's identity."""
        return self.edit.line


def shared_folders(a: list[str], b: list[str]) -> int:
    """How many leading folders two paths share."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class Project:
    """The parsed modules of one repository and the facts several finders share."""

    def __init__(self, modules: list[Module]) -> None:
        self.modules = modules
        self.text = "\n".join(m.text for m in modules)
        self._imported: dict[str, list[Module]] = {}

    @cached_property
    def uses_cuda(self) -> bool:
        return bool(re.search(r"\.cuda\(|[\"']cuda|torch\.cuda|device_map", self.text))

    @cached_property
    def has_bn_or_dropout(self) -> bool:
        return bool(re.search(r"BatchNorm|Dropout\(|\bdropout\(|timm\.|torchvision\.models|create_model", self.text))

    @cached_property
    def distributed(self) -> bool:
        return bool(re.search(r"DistributedDataParallel|init_process_group|torchrun|Accelerator\(|\bDDP\(", self.text))

    @cached_property
    def defs(self) -> dict[str, list[Span]]:
        """Function definitions by name, across the project."""
        out: dict[str, list[Span]] = {}
        for m in self.modules:
            for node in ast.walk(m.tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    out.setdefault(node.name, []).append((m.path, *m.span(node)))
        return out

    def def_text(self, name: str) -> str:
        """The source of every project function named ``name``."""
        by_path = {m.path: m for m in self.modules}
        return "\n".join(
            "".join(line.decode("utf-8", "replace") for line in by_path[path].lines[first - 1 : last])
            for path, first, last in self.defs.get(name, [])
        )

    def imported(self, module: Module) -> list[Module]:
        """The project modules ``module`` imports (``import a.b``, ``from a.b import c``, relative
        imports), matched by dotted path against the project's files; computed once per module."""
        if module.path not in self._imported:
            self._imported[module.path] = self._resolve_imports(module)
        return self._imported[module.path]

    @cached_property
    def _by_dotted(self) -> dict[str, Module]:
        return {m.path[:-3].replace("/", "."): m for m in self.modules}

    def _resolve_imports(self, module: Module) -> list[Module]:
        by_dotted = self._by_dotted
        package = module.path.rsplit("/", 1)[0].replace("/", ".") if "/" in module.path else ""
        names = []
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Import):
                names += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".") if package else []
                    parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                    base = ".".join([*parts, base] if base else parts)
                names += [base] + [f"{base}.{a.name}" for a in node.names]
        found: dict[str, Module] = {}
        here = module.path.split("/")[:-1]
        for name in filter(None, names):
            matches = [
                other
                for dotted, other in by_dotted.items()
                if other is not module
                and (dotted == name or dotted.endswith("." + name) or dotted == name + ".__init__")
            ]
            # a script imports from its own folder first: keep the candidates nearest to it
            nearness = [shared_folders(here, other.path.split("/")[:-1]) for other in matches]
            for other, near in zip(matches, nearness):
                if near == max(nearness):
                    found[other.path] = other
        return list(found.values())

    def feeds_training(self, module: Module) -> bool:
        """Whether what ``module`` builds can reach a training step: it trains, calls a project
        function named for training (``train_one_epoch``), or is imported by a module that does.
        A feature-caching or export script that only iterates its loader is left out."""

        def trains(m: Module) -> bool:
            return trains_here(m) or self.calls_train_function(m)

        if trains(module):
            return True
        return any(module.path in {x.path for x in self.imported(m)} and trains(m) for m in self.modules)

    def calls_train_function(self, module: Module) -> bool:
        """Whether ``module`` calls a function the project defines whose name says it trains."""
        return any(
            isinstance(n, ast.Call) and is_train_name(last_name(n)) and last_name(n) in self.defs
            for n in ast.walk(module.tree)
        )

    def calls_trainer(self, module: Module) -> bool:
        """Whether ``module`` calls a project function whose name says it trains
        (``train_one_epoch``, ``train``) and that runs a backward pass."""
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Call)
                and is_train_name(last_name(node))
                and "backward" in self.def_text(last_name(node))
            ):
                return True
        return False

    def calls(self, pattern: re.Pattern[str]) -> list[Span]:
        """Every call whose last name matches ``pattern``."""
        return [
            (m.path, node.lineno, node.end_lineno or node.lineno)
            for m in self.modules
            for node in ast.walk(m.tree)
            if isinstance(node, ast.Call) and pattern.fullmatch(last_name(node))
        ]


def seeded_modules(project: Project) -> Iterator[Module]:
    """The modules finders may edit: not tests, docs or setup scripts."""
    return (m for m in project.modules if not is_test_or_demo(m.path))


def makes(module: Module, pattern: re.Pattern[str]) -> bool:
    """Whether ``module`` calls a constructor whose last name matches ``pattern``."""
    return any(isinstance(n, ast.Call) and pattern.fullmatch(last_name(n)) for n in ast.walk(module.tree))


def trains_here(module: Module) -> bool:
    """Whether ``module`` itself runs a training step (a backward call or a framework's fit)."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Call) and last_name(node) in ("backward", "fit", "manual_backward"):
            return True
    return False


def in_main_block(module: Module, node: ast.AST) -> bool:
    """Whether ``node`` sits under ``if __name__ == "__main__":`` (a module's self-test or demo)."""
    return any(isinstance(up, ast.If) and "__main__" in text(up.test) for up in module.ancestors(node))


def calls_in(scope: ast.AST, name: str) -> list[ast.Call]:
    """The calls of a method or function named ``name`` inside ``scope``."""
    return [n for n in ast.walk(scope) if isinstance(n, ast.Call) and last_name(n) == name]


def has_backward(scope: ast.AST) -> bool:
    return bool(calls_in(scope, "backward") or calls_in(scope, "manual_backward"))


def receiver_text(call: ast.Call) -> str:
    return text(call.func.value) if isinstance(call.func, ast.Attribute) else ""


def seed(kind: str, module: Module, at: ast.AST, edit: Edit, scope: str, anchors: tuple[Span, ...] = ()) -> Seed:
    """A seed whose expected place is the function around ``at``."""
    return Seed(kind, module.path, edit, module.span(module.scope_of(at)), scope, anchors)


# --- data loaders (TD101, TD102, TD103) -------------------------------------------------------


@dataclass(frozen=True)
class LoaderCall:
    """A ``DataLoader(...)`` call and its settings, wherever they are written: as keywords, or in a
    dict literal (``dict(...)`` or ``{...}``) of the same function unpacked with ``**kwargs``."""

    module: Module
    call: ast.Call
    settings: dict[str, tuple[ast.AST, ast.AST]]  # name -> (the value, the node a removal deletes)
    holders: dict[str, tuple[ast.Dict | ast.Call, int]]  # name -> (dict literal, index) when in a dict

    def value(self, name: str) -> ast.AST | None:
        return self.settings[name][0] if name in self.settings else None

    def literal(self, name: str) -> object:
        value = self.value(name)
        return value.value if isinstance(value, ast.Constant) else ...


def _dict_settings(node: ast.AST) -> list[tuple[str, ast.AST, ast.AST, ast.Dict | ast.Call, int]]:
    """(name, value, removable node, holder, index) of a ``{...}`` or ``dict(...)`` literal."""
    out: list[tuple[str, ast.AST, ast.AST, ast.Dict | ast.Call, int]] = []
    if isinstance(node, ast.Dict):
        for i, (k, v) in enumerate(zip(node.keys, node.values)):
            if isinstance(k, ast.Constant) and isinstance(k.value, str):
                out.append((k.value, v, v, node, i))
    elif isinstance(node, ast.Call) and last_name(node) == "dict":
        out += [(kw.arg, kw.value, kw, node, i) for i, kw in enumerate(node.keywords) if kw.arg]
    return out


def loader_calls(module: Module) -> Iterator[LoaderCall]:
    """Every ``DataLoader(...)`` call of ``module`` with its settings."""
    for call in ast.walk(module.tree):
        if not (isinstance(call, ast.Call) and last_name(call) == "DataLoader"):
            continue
        settings: dict[str, tuple[ast.AST, ast.AST]] = {}
        holders: dict[str, tuple[ast.Dict | ast.Call, int]] = {}
        scope = module.scope_of(call)
        for kw in call.keywords:
            if kw.arg:
                settings[kw.arg] = (kw.value, kw)
            elif isinstance(kw.value, ast.Name):  # **kwargs: a dict literal bound to that name here
                for node in ast.walk(scope):
                    if (
                        isinstance(node, ast.Assign)
                        and len(node.targets) == 1
                        and isinstance(node.targets[0], ast.Name)
                        and node.targets[0].id == kw.value.id
                    ):
                        for name, value, removable, holder, index in _dict_settings(node.value):
                            settings.setdefault(name, (value, removable))
                            holders.setdefault(name, (holder, index))
        yield LoaderCall(module, call, settings, holders)


def assigned_name(module: Module, node: ast.AST) -> str:
    """The target a value is bound to (``train_loader = DataLoader(...)``), else ``""``."""
    parent = module.parents.get(node)
    if isinstance(parent, ast.Assign):
        return " ".join(text(t) for t in parent.targets)
    if isinstance(parent, ast.AnnAssign | ast.NamedExpr):
        return text(parent.target)
    return ""


def is_training_loader(loader: LoaderCall) -> bool:
    """A loader that training iterates: judged by its target name, then its dataset, then the
    enclosing function's name (``train`` in a name: yes; ``val``/``test``/``eval``...: no); with
    neutral names, a loader that may shuffle or has a sampler is a training loader (a generic
    ``build_loader(dataset, shuffle=is_train)`` serves training too). In-memory tensor datasets
    are left out (workers and pinning matter little for them)."""
    module, call = loader.module, loader.call
    dataset = call.args[0] if call.args else loader.value("dataset")
    function = module.function_of(call)
    names = [assigned_name(module, call), text(dataset) if dataset else "", function.name if function else ""]
    if dataset is not None and "TensorDataset" in text(dataset):
        return False
    for name in names:
        if is_eval_name(name):
            return False
        if is_train_name(name):
            return True
    shuffle = loader.value("shuffle")
    sampler = loader.value("sampler") or loader.value("batch_sampler")
    if sampler is not None and is_eval_name(text(sampler)):
        return False
    if shuffle is not None:
        return not (isinstance(shuffle, ast.Constant) and shuffle.value is False)
    return sampler is not None


def _loader_scope(loader: LoaderCall) -> str:
    return SINGLE if trains_here(loader.module) else CROSS


def _loader_seed(kind: str, loader: LoaderCall, edit: Edit) -> Seed:
    call = loader.call
    span = (call.lineno, call.end_lineno or call.lineno)
    anchors: tuple[Span, ...] = ()
    if loader.holders:  # the settings live in a dict literal: the finding may cite either place
        holder = next(iter(loader.holders.values()))[0]
        anchors = ((loader.module.path, holder.lineno, holder.end_lineno or holder.lineno),)
    return Seed(kind, loader.module.path, edit, span, _loader_scope(loader), anchors)


def _remove_setting(loader: LoaderCall, name: str) -> Edit:
    removable = loader.settings[name][1]
    if name in loader.holders and isinstance(loader.holders[name][0], ast.Dict):
        holder, index = loader.holders[name]
        assert isinstance(holder, ast.Dict)
        return loader.module.remove_dict_item(holder, index)
    assert isinstance(removable, ast.keyword | ast.expr)
    return loader.module.remove_argument(removable)


def _training_loaders(project: Project) -> Iterator[LoaderCall]:
    """Training loaders of modules that reach a training step (see :meth:`Project.feeds_training`)."""
    for module in seeded_modules(project):
        if not project.feeds_training(module):
            continue
        for loader in loader_calls(module):
            if is_training_loader(loader) and not (in_main_block(module, loader.call) and not trains_here(module)):
                yield loader


def find_pin_memory(project: Project) -> Iterator[Seed]:
    """``pin_memory=True`` (or ``torch.cuda.is_available()``) removed from a training loader of a
    project that trains on CUDA."""
    if not project.uses_cuda:
        return
    for loader in _training_loaders(project):
        value = loader.value("pin_memory")
        if value is None:
            continue
        if loader.literal("pin_memory") is True or text(value).endswith("cuda.is_available()"):
            yield _loader_seed("pin-memory-removed", loader, _remove_setting(loader, "pin_memory"))


def _workers_positive(loader: LoaderCall) -> bool:
    workers = loader.literal("num_workers")
    return loader.value("num_workers") is not None and not (isinstance(workers, int) and workers <= 0)


def find_num_workers(project: Project) -> Iterator[Seed]:
    """``num_workers=N`` (N not 0) set to ``0`` in a training loader. Loaders that also set
    ``persistent_workers`` or ``prefetch_factor`` are left out: with 0 workers PyTorch raises,
    so the edit would be a crash, not a silent mistake."""
    for loader in _training_loaders(project):
        if not _workers_positive(loader) or {"persistent_workers", "prefetch_factor"} & set(loader.settings):
            continue
        value = loader.value("num_workers")
        assert value is not None
        yield _loader_seed("num-workers-zero", loader, node_edit(value, "0"))


def find_persistent_workers(project: Project) -> Iterator[Seed]:
    """``persistent_workers=True`` (or ``num_workers > 0``) removed from a training loader with
    workers."""
    for loader in _training_loaders(project):
        value = loader.value("persistent_workers")
        if value is None or not _workers_positive(loader):
            continue
        if loader.literal("persistent_workers") is True or re.fullmatch(r".*workers\w* > 0", text(value)):
            yield _loader_seed("persistent-workers-removed", loader, _remove_setting(loader, "persistent_workers"))


# --- checkpoints (TD501, TD502, TD503, TD505) -------------------------------------------------

STATE_ROLES = {"optimizer": ("optimizer-not-saved", OPTIMIZER_CALLS)}
STATE_ROLES |= {"scheduler": ("scheduler-not-saved", SCHEDULER_CALLS), "scaler": ("scaler-not-saved", SCALER_CALLS)}
RESUME_KINDS = {"optimizer": "optimizer-not-restored", "scheduler": "scheduler-not-restored"}
RESUME_KINDS |= {"scaler": "scaler-not-restored"}


def _state_of(node: ast.AST) -> str | None:
    """The receiver of ``X.state_dict()``, else None."""
    if isinstance(node, ast.Call) and last_name(node) == "state_dict" and isinstance(node.func, ast.Attribute):
        return text(node.func.value)
    return None


def _is_model_state(key: ast.AST | None, value: ast.AST) -> bool:
    state = _state_of(value)
    if state is not None:
        return role(state) == "other"
    name = key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else ""
    return bool(re.search(r"model|state_dict|net|weight|param|ema|generator|discriminator", name, re.I))


def _saved(module: Module, node: ast.AST) -> ast.Call | None:
    """The save call that writes ``node``: ``torch.save(node, ...)``/``save_checkpoint(node, ...)``
    directly, or through a name bound to it in the same function."""
    parent = module.parents.get(node)
    if isinstance(parent, ast.Call) and "save" in last_name(parent).lower() and node in parent.args:
        return parent
    bound = assigned_name(module, node)
    if not re.fullmatch(r"\w+", bound):
        return None
    for call in ast.walk(module.scope_of(node)):
        if (
            isinstance(call, ast.Call)
            and "save" in last_name(call).lower()
            and any(isinstance(a, ast.Name) and a.id == bound for a in call.args)
        ):
            return call
    return None


def is_export(module: Module, save: ast.Call) -> bool:
    """Whether a save is a best-model export rather than a checkpoint (the catalog's definition):
    its path says ``best``, or it is guarded by a metric comparison (``if acc > best:``)."""
    if re.search(r"best", text(save), re.I):
        return True
    for up in module.ancestors(save):
        if isinstance(up, ast.If) and isinstance(up.test, ast.Compare):
            if re.search(r"best|acc|loss|metric|score|fid|psnr|bleu|ppl|perplexity", text(up.test), re.I):
                return True
    return False


def find_checkpoint_states(project: Project) -> Iterator[Seed]:
    """An optimizer's, scheduler's or scaler's ``state_dict()`` dropped from a checkpoint dict
    that also holds the model's weights and is saved (``torch.save``, ``save_on_master``,
    ``accelerator.save``, a project's ``save_checkpoint``). Single-file when the edited file
    builds that optimizer (scheduler, scaler); cross-file when the dict is made in a helper that
    receives it. The save helper's definition is an anchor (the finding may sit at its
    ``torch.save``)."""
    for module in seeded_modules(project):
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.Dict) or not any(_is_model_state(k, v) for k, v in zip(node.keys, node.values)):
                continue
            save = _saved(module, node)
            if save is None or is_export(module, save):
                continue
            anchors = tuple(project.defs.get(last_name(save), []))
            for index, value in enumerate(node.values):
                state = _state_of(value)
                if state is None or role(state) not in STATE_ROLES or node.keys[index] is None:
                    continue
                kind, maker = STATE_ROLES[role(state)]
                edit = module.remove_dict_item(node, index)
                yield seed(kind, module, node, edit, SINGLE if makes(module, maker) else CROSS, anchors)


def saved_state_keys(source: str) -> set[str]:
    """The keys under which ``source`` stores a ``state_dict()`` (``{"optimizer": opt.state_dict()}``,
    ``ckpt["optimizer"] = opt.state_dict()``)."""
    keys = set(re.findall(r"[\"'](\w+)[\"']\s*:\s*[\w.\[\]\"']+\.state_dict\(\)", source))
    return keys | set(re.findall(r"\[[\"'](\w+)[\"']\]\s*=\s*[\w.\[\]\"']+\.state_dict\(\)", source))


def find_resume_states(project: Project) -> Iterator[Seed]:
    """``optimizer.load_state_dict(checkpoint["optimizer"])`` (scheduler, scaler) deleted from a
    resume path that restores the model too, when the project saves that state under that key.
    Single-file when the edited file also writes that key."""
    saved = saved_state_keys(project.text)
    for module in seeded_modules(project):
        for stmt in ast.walk(module.tree):
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
                continue
            call = stmt.value
            if last_name(call) != "load_state_dict" or role(receiver_text(call)) not in RESUME_KINDS or not call.args:
                continue
            key = call.args[0]
            if not (
                isinstance(key, ast.Subscript) and isinstance(key.slice, ast.Constant) and key.slice.value in saved
            ):
                continue
            loads = calls_in(module.scope_of(stmt), "load_state_dict")
            if not any(role(receiver_text(c)) == "other" for c in loads):
                continue
            scope_kind = SINGLE if key.slice.value in saved_state_keys(module.text) else CROSS
            kind = RESUME_KINDS[role(receiver_text(call))]
            yield seed(kind, module, stmt, module.statement_to_pass(stmt), scope_kind)


# --- mixed precision (TD301, TD302, TD303) ----------------------------------------------------


def is_torch_clip(call: ast.Call) -> bool:
    """``torch.nn.utils.clip_grad_norm_(...)``/``clip_grad_value_`` (also imported bare) that
    clips: not a project's or accelerate's own helper, not a ``None`` limit (a norm computed for
    logging only)."""
    receiver = receiver_text(call)
    if "clip_grad" not in last_name(call) or (receiver and not receiver.endswith("nn.utils")):
        return False
    limits = call.args[1:2] + [k.value for k in call.keywords if k.arg in ("max_norm", "clip_value")]
    return not any(isinstance(v, ast.Constant) and v.value is None for v in limits)


def find_unscale(project: Project) -> Iterator[Seed]:
    """``scaler.unscale_(optimizer)`` deleted where torch clips the gradients after it in the same
    function (see :func:`is_torch_clip`)."""
    for module in seeded_modules(project):
        for stmt in ast.walk(module.tree):
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
                continue
            if last_name(stmt.value) != "unscale_":
                continue
            scope = module.scope_of(stmt)
            clips = [c for c in ast.walk(scope) if isinstance(c, ast.Call) and is_torch_clip(c)]
            if any(c.lineno > stmt.lineno for c in clips):
                scope_kind = SINGLE if makes(module, SCALER_CALLS) else CROSS
                yield seed("unscale-removed", module, stmt, module.statement_to_pass(stmt), scope_kind)


def find_scaler_update(project: Project) -> Iterator[Seed]:
    """``scaler.update()`` deleted after ``scaler.step(optimizer)`` in the same function."""
    for module in seeded_modules(project):
        for stmt in ast.walk(module.tree):
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
                continue
            call = stmt.value
            if last_name(call) != "update" or call.args or role(receiver_text(call)) != "scaler":
                continue
            steps = [c for c in calls_in(module.scope_of(stmt), "step") if receiver_text(c) == receiver_text(call)]
            if steps:
                scope_kind = SINGLE if makes(module, SCALER_CALLS) else CROSS
                yield seed("scaler-update-removed", module, stmt, module.statement_to_pass(stmt), scope_kind)


def _autocast_dtypes(module: Module) -> list[str]:
    """The dtype text of every autocast call of the module (``""`` when none is given)."""
    out = []
    for call in ast.walk(module.tree):
        if isinstance(call, ast.Call) and last_name(call) == "autocast":
            dtype = next((kw.value for kw in call.keywords if kw.arg == "dtype"), None)
            out.append(text(dtype) if dtype is not None else "")
    return out


def find_scaler_disabled(project: Project) -> Iterator[Seed]:
    """A ``GradScaler()`` made inert (``enabled=False``) in a file whose autocast regions run in
    float16 (no dtype, or ``torch.float16``/``torch.half``): fp16 gradients without loss scaling."""
    for module in seeded_modules(project):
        dtypes = _autocast_dtypes(module)
        if not dtypes or not all(d in ("", "torch.float16", "torch.half") for d in dtypes):
            continue
        for call in ast.walk(module.tree):
            if not (isinstance(call, ast.Call) and last_name(call) == "GradScaler"):
                continue
            enabled = next((kw for kw in call.keywords if kw.arg == "enabled"), None)
            if enabled is not None:
                edit = node_edit(enabled.value, "False")
            elif not call.args and not call.keywords:
                end = (call.end_lineno or call.lineno, (call.end_col_offset or 1) - 1)
                edit = Edit(end[0], end[1], end[0], end[1], "enabled=False")
            else:
                continue
            yield seed("grad-scaler-disabled", module, call, edit, SINGLE)


# --- distributed (TD601) ----------------------------------------------------------------------


def find_set_epoch(project: Project) -> Iterator[Seed]:
    """``sampler.set_epoch(epoch)`` (also ``loader.sampler.set_epoch``) deleted in a project that
    builds a ``DistributedSampler``; the sampler's constructions are anchors (TD601 is reported
    there). Single-file when the edited file builds the sampler."""
    samplers = project.calls(re.compile("DistributedSampler"))
    if not samplers:
        return
    for module in seeded_modules(project):
        for stmt in ast.walk(module.tree):
            if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
                continue
            call = stmt.value
            if last_name(call) != "set_epoch" or "sampler" not in receiver_text(call).lower():
                continue
            scope_kind = SINGLE if any(path == module.path for path, _, _ in samplers) else CROSS
            yield seed("set-epoch-removed", module, stmt, module.statement_to_pass(stmt), scope_kind, tuple(samplers))


# --- evaluation (TD701, TD702, TD703) ---------------------------------------------------------


def _model_calls(scope: ast.AST, model: str) -> list[ast.Call]:
    """Forward calls of ``model`` in ``scope``: ``model(x)``, ``model.forward(x)``."""
    forms = (model, f"{model}.forward")
    return [n for n in ast.walk(scope) if isinstance(n, ast.Call) and text(n.func) in forms]


LOOPS = (ast.For, ast.AsyncFor, ast.While, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _loops_calling(scope: ast.AST, model: str, after: int) -> list[ast.AST]:
    """Loops (comprehensions too) starting after line ``after`` in ``scope`` that call ``model``."""
    return [n for n in ast.walk(scope) if isinstance(n, LOOPS) and n.lineno > after and _model_calls(n, model)]


def _under_no_grad(module: Module, node: ast.AST) -> bool:
    """Whether a ``no_grad``/``inference_mode`` block or decorator of its function covers ``node``."""
    for up in module.ancestors(node):
        if isinstance(up, ast.With | ast.AsyncWith) and any(text(i.context_expr) in NO_GRAD for i in up.items):
            return True
        if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef):
            return any(text(d) in NO_GRAD for d in up.decorator_list)
    return False


def _eval_function(function: ast.AST | None) -> bool:
    """An evaluation function: no backward, no optimizer step, and not named like training."""
    if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) or has_backward(function):
        return False
    if any(role(receiver_text(c)) == "optimizer" for c in calls_in(function, "step")):
        return False
    return not is_train_name(function.name)


def _is_eval_call(node: ast.AST) -> bool:
    """``model.eval()``."""
    return (
        isinstance(node, ast.Call)
        and last_name(node) == "eval"
        and not node.args
        and isinstance(node.func, ast.Attribute)
    )


def _eval_calls(function: ast.AST) -> list[ast.Call]:
    """``model.eval()`` calls in ``function``."""
    return [c for c in ast.walk(function) if isinstance(c, ast.Call) and _is_eval_call(c)]


def find_eval_mode(project: Project) -> Iterator[Seed]:
    """``model.eval()`` deleted before an evaluation loop (no backward, no optimizer step in the
    function; every call of the model there runs under ``no_grad``/``inference_mode``; no
    ``model.train()`` between the two) in a project whose models have BatchNorm or Dropout.
    Cross-file unless those layers are written in the edited file."""
    if not project.has_bn_or_dropout:
        return
    for module in seeded_modules(project):
        for call in ast.walk(module.tree):
            stmt = module.parents.get(call)
            if not (isinstance(call, ast.Call) and isinstance(stmt, ast.Expr) and _is_eval_call(call)):
                continue
            function = module.function_of(stmt)
            model = receiver_text(call)
            if function is None or not _eval_function(function):
                continue
            loops = _loops_calling(function, model, stmt.lineno)
            if not loops or not all(_under_no_grad(module, c) for c in _model_calls(function, model)):
                continue
            first = min(loop.lineno for loop in loops)
            if any(stmt.lineno < c.lineno < first and receiver_text(c) == model for c in calls_in(function, "train")):
                continue
            here = bool(re.search(r"BatchNorm|Dropout\(", module.text))
            yield seed("eval-mode-removed", module, stmt, module.statement_to_pass(stmt), SINGLE if here else CROSS)


def find_no_grad(project: Project) -> Iterator[Seed]:
    """``with torch.no_grad():`` turned into ``if True:`` (or ``@torch.no_grad()`` removed) around
    an evaluation loop of a model that the same function put in eval mode before, in a function
    with no backward and no optimizer step."""
    for module in seeded_modules(project):
        for function in ast.walk(module.tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) or not _eval_function(function):
                continue
            evals = _eval_calls(function)
            decorator = next((d for d in function.decorator_list if text(d) in NO_GRAD), None)
            if decorator is not None and any(_loops_calling(function, receiver_text(c), c.lineno) for c in evals):
                end = (decorator.end_lineno or decorator.lineno, decorator.end_col_offset or 0)
                edit = Edit(decorator.lineno, decorator.col_offset - 1, *end, "")
                yield seed("no-grad-removed", module, function.body[0], edit, SINGLE)
            for block in ast.walk(function):
                if (
                    not (isinstance(block, ast.With) and len(block.items) == 1)
                    or module.function_of(block) is not function
                ):
                    continue
                item = block.items[0].context_expr
                if text(item) not in NO_GRAD:
                    continue
                models = [receiver_text(c) for c in evals if c.lineno <= block.lineno]
                if any(_loops_calling(block, model, 0) for model in models):
                    end = (item.end_lineno or item.lineno, item.end_col_offset or 0)
                    yield seed(
                        "no-grad-removed", module, block, Edit(block.lineno, block.col_offset, *end, "if True"), SINGLE
                    )


def _backward_of(loop: ast.AST, name: str) -> bool:
    """Whether ``name`` is backpropagated in ``loop`` (``name.backward()``,
    ``scaler.scale(name).backward()``, ``accelerator.backward(name)``)."""
    for call in calls_in(loop, "backward"):
        if name in {text(a) for a in call.args} or re.search(rf"\b{re.escape(name)}\b", text(call.func)):
            return True
    return False


def _meter_accumulates(project: Project, method: str) -> str | None:
    """The file of a project class whose ``method(self, value, ...)`` adds ``value`` into an
    attribute (an average meter), else None."""
    for module in project.modules:
        for node in ast.walk(module.tree):
            if isinstance(node, ast.FunctionDef) and node.name == method and len(node.args.args) >= 2:
                value = node.args.args[1].arg
                for aug in ast.walk(node):
                    if (
                        isinstance(aug, ast.AugAssign)
                        and isinstance(aug.target, ast.Attribute)
                        and re.search(rf"\b{value}\b", text(aug.value))
                    ):
                        return module.path
    return None


def find_loss_item(project: Project) -> Iterator[Seed]:
    """``loss.item()`` replaced by ``loss`` where it is accumulated (``total += loss.item()``, or
    passed to a project meter's ``update`` that sums it) in the loop that backpropagates ``loss``.
    The meter case is cross-file when the meter class is defined in another module."""
    for module in seeded_modules(project):
        for call in ast.walk(module.tree):
            if not (isinstance(call, ast.Call) and last_name(call) == "item" and not call.args):
                continue
            loss = receiver_text(call)
            if not re.fullmatch(r"\w+", loss):
                continue
            loop = next((u for u in module.ancestors(call) if isinstance(u, ast.For | ast.While)), None)
            if loop is None or not _backward_of(loop, loss):
                continue
            holder = next((u for u in module.ancestors(call) if isinstance(u, ast.stmt)), None)
            scope_kind = SINGLE
            if isinstance(holder, ast.AugAssign) and isinstance(holder.op, ast.Add):
                pass
            elif (
                isinstance(holder, ast.Expr)
                and isinstance(holder.value, ast.Call)
                and last_name(holder.value) == "update"
                and call in holder.value.args[:1]
            ):
                meter = _meter_accumulates(project, "update")
                if meter is None:
                    continue
                scope_kind = SINGLE if meter == module.path else CROSS
            else:
                continue
            yield seed("loss-item-removed", module, call, node_edit(call, loss), scope_kind)


# --- optimizer (TD203, TD204) -----------------------------------------------------------------


def _groups_exempt_decay(scope_text: str) -> bool:
    return bool(
        re.search(r"no_decay|weight_decay[\"']?\s*[:=]\s*0(\.0*)?\b|ndim\s*<=?\s*1|\.shape\)\s*==\s*1|bias", scope_text)
    )


def find_decay_groups(project: Project) -> Iterator[Seed]:
    """The parameter groups that exempt biases and norms from weight decay replaced by
    ``model.parameters()`` in an optimizer's construction (the model is the one whose
    ``named_parameters()`` the groups are built from, or the group helper's first argument).
    Only where decay then applies: a ``weight_decay`` argument that is not 0, AdamW's default, or
    the decay value the groups used, written into the call."""
    for module in seeded_modules(project):
        for call in ast.walk(module.tree):
            if not (isinstance(call, ast.Call) and OPTIMIZER_CALLS.fullmatch(last_name(call))):
                continue
            if last_name(call).startswith(("create_", "build_", "get_", "make_", "init_", "setup_", "configure")):
                continue
            params = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "params"), None)
            if params is None or text(params).endswith(".parameters()"):
                continue
            function = module.scope_of(call)
            scope_text = ast.get_source_segment(module.text, function) if function is not module.tree else module.text
            helper = None
            if isinstance(params, ast.Name):
                binding = [
                    n.value
                    for n in ast.walk(function)
                    if isinstance(n, ast.Assign) and any(text(t) == params.id for t in n.targets)
                ]
                helper = binding[0] if binding and isinstance(binding[0], ast.Call) else None
            elif isinstance(params, ast.Call):
                helper = params
            model = None
            names = re.findall(r"([\w.]+)\.named_parameters\(\)", scope_text or "")
            if names:
                model = names[0]
            elif helper is not None and helper.args and isinstance(helper.args[0], ast.Name | ast.Attribute):
                model = text(helper.args[0])
            helper_text = project.def_text(last_name(helper)) if helper is not None else ""
            if model is None or not (
                _groups_exempt_decay(scope_text or "") or (helper is not None and "decay" in text(helper) + helper_text)
            ):
                continue
            decay = next((k.value for k in call.keywords if k.arg == "weight_decay"), None)
            new = f"{model}.parameters()"
            if decay is not None:
                if isinstance(decay, ast.Constant) and not decay.value:
                    continue
            elif helper is not None and len(helper.args) > 1 and "decay" in text(helper.args[1]):
                new += f", weight_decay={text(helper.args[1])}"
            elif last_name(call) != "AdamW":
                continue
            yield seed("decay-groups-removed", module, call, node_edit(params, new), SINGLE)


def find_lr_scaling(project: Project) -> Iterator[Seed]:
    """A learning rate scaled with the batch size or the world size (``lr = blr * batch *
    world_size / 256``) replaced by its unscaled base, in a project that trains on several
    processes (the global batch grows with them). Single-file when the edited file builds the
    optimizer."""
    if not project.distributed:
        return
    grows = re.compile(r"batch|world|num_gpus|n_gpu|ngpu|num_processes|nodes|accum", re.I)
    for module in seeded_modules(project):
        for node in ast.walk(module.tree):
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.BinOp)):
                continue
            target = text(node.targets[0]).rsplit(".", 1)[-1].lower()
            if not re.search(r"(^|_)lr$|learning_rate", target):
                continue
            operands = [n for n in ast.walk(node.value) if isinstance(n, ast.Name | ast.Attribute | ast.Call)]
            bases = [n for n in operands if re.search(r"lr|learning_rate", text(n).rsplit(".", 1)[-1], re.I)]
            if not bases or not any(grows.search(text(n)) for n in operands):
                continue
            scope_kind = SINGLE if makes(module, OPTIMIZER_CALLS) else CROSS
            yield seed("lr-scaling-removed", module, node, node_edit(node.value, text(bases[0])), scope_kind)


# --- backends and loading (TD401, TD506) ------------------------------------------------------


CONV = re.compile(r"\bConv[123]d\(|torchvision\.models|\bresnet\d|timm\.create_model|\bUNet\w*\(")


def find_cudnn_benchmark(project: Project) -> Iterator[Seed]:
    """``cudnn.benchmark = True`` deleted in a training script (the file trains, or calls a
    project function that does) whose model is convolutional: convolutions in the file itself
    (single-file) or in a project module it imports (cross-file). Evaluation, test, demo and
    verification scripts are left out, and so are files that also ask for deterministic
    algorithms. The expected place is the whole file."""
    for module in seeded_modules(project):
        stem = module.path.rsplit("/", 1)[-1][:-3]
        if is_eval_name(stem) or "verify" in stem or re.search(r"cudnn\.deterministic\s*=\s*True", module.text):
            continue
        if not (trains_here(module) or project.calls_trainer(module)):
            continue
        here = bool(CONV.search(module.text))
        imported = project.imported(module)
        if not (here or any(CONV.search(m.text) for m in imported)):
            continue
        for node in ast.walk(module.tree):
            if (
                isinstance(node, ast.Assign)
                and text(node.targets[0]).endswith("cudnn.benchmark")
                and isinstance(node.value, ast.Constant)
                and node.value.value is True
            ):
                yield Seed("cudnn-benchmark-removed", module.path, module.statement_to_pass(node),
                           module.span(module.tree), SINGLE if here else CROSS)  # fmt: skip


def find_weights_only(project: Project) -> Iterator[Seed]:
    """``torch.load(..., weights_only=True)`` turned into ``weights_only=False``."""
    for module in seeded_modules(project):
        for call in ast.walk(module.tree):
            if isinstance(call, ast.Call) and text(call.func) == "torch.load":
                for kw in call.keywords:
                    if kw.arg == "weights_only" and isinstance(kw.value, ast.Constant) and kw.value.value is True:
                        yield Seed("weights-only-disabled", module.path, node_edit(kw.value, "False"),
                                   (call.lineno, call.end_lineno or call.lineno), SINGLE)  # fmt: skip


@dataclass(frozen=True)
class Kind:
    """A kind of seeded mistake: the rule that must report it and the finder of its places."""

    name: str
    code: str
    what: str
    find: Callable[[Project], Iterator[Seed]]


KINDS = {
    k.name: k
    for k in (
        Kind("pin-memory-removed", "TD101", "`pin_memory=True` removed from a training DataLoader", find_pin_memory),
        Kind("num-workers-zero", "TD102", "`num_workers=N` set to 0 in a training DataLoader", find_num_workers),
        Kind("persistent-workers-removed", "TD103", "`persistent_workers=True` removed", find_persistent_workers),
        Kind("lr-scaling-removed", "TD203", "the lr's batch/world-size scaling removed", find_lr_scaling),
        Kind("decay-groups-removed", "TD204", "decay-free param groups -> `model.parameters()`", find_decay_groups),
        Kind("grad-scaler-disabled", "TD301", "GradScaler disabled under float16 autocast", find_scaler_disabled),
        Kind("unscale-removed", "TD302", "`scaler.unscale_(optimizer)` before clipping deleted", find_unscale),
        Kind("scaler-update-removed", "TD303", "`scaler.update()` deleted", find_scaler_update),
        Kind("cudnn-benchmark-removed", "TD401", "`cudnn.benchmark = True` deleted", find_cudnn_benchmark),
        Kind("optimizer-not-saved", "TD501", "optimizer state dropped from a checkpoint", find_checkpoint_states),
        Kind("scheduler-not-saved", "TD502", "scheduler state dropped from a checkpoint", find_checkpoint_states),
        Kind("scaler-not-saved", "TD503", "scaler state dropped from a checkpoint", find_checkpoint_states),
        Kind("optimizer-not-restored", "TD505", "optimizer `load_state_dict` deleted on resume", find_resume_states),
        Kind("scheduler-not-restored", "TD505", "scheduler `load_state_dict` deleted on resume", find_resume_states),
        Kind("scaler-not-restored", "TD505", "scaler `load_state_dict` deleted on resume", find_resume_states),
        Kind("weights-only-disabled", "TD506", "`weights_only=True` -> `False` in torch.load", find_weights_only),
        Kind("set-epoch-removed", "TD601", "`sampler.set_epoch(epoch)` deleted", find_set_epoch),
        Kind("eval-mode-removed", "TD701", "`model.eval()` before an evaluation loop deleted", find_eval_mode),
        Kind("no-grad-removed", "TD702", "`torch.no_grad()` around an evaluation loop removed", find_no_grad),
        Kind("loss-item-removed", "TD703", "accumulated `loss.item()` replaced by the tensor", find_loss_item),
    )
}


def find_seeds(project: Project) -> list[Seed]:
    """Every seed of every kind in ``project``, once each, in file and line order."""
    seen: dict[tuple[str, str, int], Seed] = {}
    for finder in dict.fromkeys(k.find for k in KINDS.values()):
        for found in finder(project):
            seen.setdefault((found.kind, found.file, found.line), found)
    return sorted(seen.values(), key=lambda s: (s.file, s.line, s.kind))
