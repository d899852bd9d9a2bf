"""What a ``torch.save``\\ d object holds, compared with the live training objects (TD501-TD504).

The object is walked in place (dicts, lists, tuples; a bounded number of nodes): nothing is
copied, converted or moved. It is recognised by structure, not by key names:

* model weights: a mapping whose keys cover at least half of a live root model's
  ``state_dict()`` keys (ignoring ``module.`` / ``_orig_mod.`` wrapper prefixes), or a mapping
  of tensors whose keys are all keys of a live model (a partial save, e.g. adapters), or a live
  ``nn.Module`` itself;
* optimizer state: a mapping with ``state`` and ``param_groups`` (a list of dicts with
  ``params``), or an ``Optimizer``; it is matched to a live optimizer by group sizes;
* scheduler state: a mapping with ``last_epoch`` and ``base_lrs`` or ``_last_lr``, or a scheduler;
* GradScaler state: a mapping with ``scale`` and ``growth_factor``, or a ``GradScaler``;
* RNG states: a CPU ``uint8`` tensor the size of ``torch.get_rng_state()`` (torch), ``uint8``
  tensors of CUDA generator state size (cuda), ``('MT19937', array, ...)`` or a bit-generator
  state dict or a ``RandomState``/``Generator`` (numpy), ``(3, <625 ints>, None)`` (python).

Which RNG streams the run actually draws from is decided by :class:`RngUse`: it snapshots each
global generator's state when training starts and compares at save time (reading a generator's
state never advances it).
"""

from __future__ import annotations

import sys
from typing import Any, cast

from traindoctor.runtime.live import fields_repr

MAX_NODES = 20000
MAX_DEPTH = 8
#: Key words that make an integer entry look like a data position (step / batch index).
POSITION_WORDS = (
    "step",
    "iter",
    "batch",
    "position",
    "sample",
    "index",
    "idx",
    "cursor",
    "offset",
    "sampler",
    "loader",
)
CUDA_STATE_NUMEL = 16


class Contents:
    """What one saved object holds."""

    __slots__ = (
        "has_scaler",
        "has_scheduler",
        "int_keys",
        "models",
        "nodes",
        "optimizer_objects",
        "optimizer_states",
        "rng",
    )

    models: list[Any]
    optimizer_states: list[tuple[int, ...]]
    optimizer_objects: list[Any]
    has_scheduler: bool
    has_scaler: bool
    rng: set[str]
    #: Keys of integer leaves outside recognised state dicts (``epoch``, ``step``, ...).
    int_keys: list[str]
    nodes: int

    def __init__(self) -> None:
        self.models = []
        self.optimizer_states = []
        self.optimizer_objects = []
        self.has_scheduler = self.has_scaler = False
        self.rng = set()
        self.int_keys = []
        self.nodes = 0

    def __repr__(self) -> str:
        return fields_repr(self, self.__slots__)

    @property
    def has_model(self) -> bool:
        return bool(self.models)

    @property
    def has_optimizer(self) -> bool:
        return bool(self.optimizer_states or self.optimizer_objects)

    @property
    def is_training_checkpoint(self) -> bool:
        """Model weights plus something for resuming (beyond a bare weights export)."""
        return self.has_model and (
            self.has_optimizer or self.has_scheduler or self.has_scaler or bool(self.rng) or bool(self.int_keys)
        )

    def has_position(self) -> bool:
        return any(any(w in key.lower() for w in POSITION_WORDS) for key in self.int_keys)


def _strip(key: str) -> str:
    for prefix in ("module.", "_orig_mod."):
        while key.startswith(prefix):
            key = key[len(prefix) :]
    return key


class _ModelKeys:
    """Normalised ``state_dict`` key sets of the live models, computed once per save."""

    def __init__(self, models: list[Any]) -> None:
        self.models = models
        self._keys: list[set[str]] | None = None

    def keys(self) -> list[set[str]]:
        if self._keys is None:
            out = []
            for model in self.models:
                try:
                    out.append({_strip(k) for k in model.state_dict().keys()})
                except Exception:
                    out.append(set())
            self._keys = out
        return self._keys


def audit(obj: Any, models: list[Any]) -> Contents:
    """Walk ``obj`` (in place) and say what it holds; ``models`` are the live root models."""
    import torch

    contents = Contents()
    model_keys = _ModelKeys(models)
    cpu_rng_numel = int(torch.default_generator.get_state().numel())
    np_mod = sys.modules.get("numpy")
    stack: list[tuple[Any, int, str]] = [(obj, 0, "")]
    seen: set[int] = set()
    while stack and contents.nodes < MAX_NODES:
        node, depth, key = stack.pop()
        contents.nodes += 1
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, torch.Tensor):
            _tensor_rng(node, cpu_rng_numel, contents)
            continue
        if isinstance(node, bool):
            continue
        if isinstance(node, int):
            if key:
                contents.int_keys.append(key)
            continue
        if isinstance(node, torch.nn.Module):
            _module(node, models, contents)
            continue
        if isinstance(node, torch.optim.Optimizer):
            contents.optimizer_objects.append(node)
            continue
        if _is_scheduler(node):
            contents.has_scheduler = True
            continue
        if type(node).__name__ == "GradScaler":
            contents.has_scaler = True
            continue
        if np_mod is not None and _numpy_rng(node, np_mod):
            contents.rng.add("numpy")
            continue
        if isinstance(node, dict):
            if _rng_mapping(node, contents):
                continue
            if node and any(word in key.lower() for word in ("sampler", "loader")):
                contents.int_keys.append(key)  # a sampler/loader state is a data position
            if _classify_mapping(node, model_keys, contents):
                continue
            if depth < MAX_DEPTH:
                for k, v in node.items():
                    stack.append((v, depth + 1, str(k)))
            continue
        if isinstance(node, (list, tuple)):
            if _python_rng(node):
                contents.rng.add("python")
                continue
            if depth < MAX_DEPTH:
                for v in node:
                    stack.append((v, depth + 1, key))
    return contents


def _tensor_rng(t: Any, cpu_numel: int, contents: Contents) -> None:
    import torch

    if t.dtype is not torch.uint8 or t.dim() != 1 or t.device.type != "cpu":
        return
    n = t.numel()
    if n == cpu_numel:
        contents.rng.add("torch")
    elif n == CUDA_STATE_NUMEL:
        contents.rng.add("cuda")


def _module(node: Any, models: list[Any], contents: Contents) -> None:
    for model in models:
        if node is model:
            contents.models.append(model)
            return
        try:
            if any(m is node for m in model.modules()) or any(m is model for m in node.modules()):
                contents.models.append(model)
                return
        except Exception:
            continue


def _is_scheduler(node: Any) -> bool:
    try:
        from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

        return isinstance(node, (LRScheduler, ReduceLROnPlateau))
    except Exception:  # pragma: no cover
        return False


def _numpy_rng(node: Any, np: Any) -> bool:
    if isinstance(node, (np.random.RandomState, np.random.Generator)):
        return True
    if isinstance(node, tuple) and len(node) == 5 and node[0] == "MT19937":
        return True
    if isinstance(node, dict) and "bit_generator" in node and "state" in node:
        return True
    return False


def _rng_mapping(node: dict[Any, Any], contents: Contents) -> bool:
    """RNG states stored as plain mappings (the ``weights_only``-safe form of
    ``traindoctor.checkpoint.save``): Python's ``{version, state, gauss_next}`` and NumPy's
    ``{kind, keys, pos, ...}``."""
    keys = node.keys()
    if "version" in keys and "state" in keys and "gauss_next" in keys:
        contents.rng.add("python")
        return True
    if "keys" in keys and "pos" in keys and str(node.get("kind", "")) == "MT19937":
        contents.rng.add("numpy")
        return True
    return False


def _python_rng(node: Any) -> bool:
    return (
        isinstance(node, tuple)
        and len(node) == 3
        and node[0] == 3
        and isinstance(node[1], tuple)
        and len(node[1]) == 625
    )


def _classify_mapping(node: dict[Any, Any], model_keys: _ModelKeys, contents: Contents) -> bool:
    """Recognise a state dict; True when ``node`` was consumed (no need to descend)."""
    import torch

    keys = node.keys()
    if "state" in keys and "param_groups" in keys and isinstance(node.get("param_groups"), list):
        sizes = []
        for group in node["param_groups"]:
            params = group.get("params", []) if isinstance(group, dict) else []
            sizes.append(len(params) if isinstance(params, (list, tuple)) else 0)
        contents.optimizer_states.append(tuple(sizes))
        return True
    if "last_epoch" in keys and ("base_lrs" in keys or "_last_lr" in keys):
        contents.has_scheduler = True
        return True
    if "scale" in keys and "growth_factor" in keys:
        contents.has_scaler = True
        return True
    if not node or not all(isinstance(k, str) for k in keys):
        return False
    tensors = sum(1 for v in node.values() if isinstance(v, torch.Tensor))
    if tensors == 0:
        return False
    names = {_strip(k) for k in keys}
    for model, mkeys in zip(model_keys.models, model_keys.keys()):
        if not mkeys:
            continue
        overlap = len(names & mkeys)
        if overlap * 2 >= len(mkeys) or (overlap == len(names) and tensors == len(node)):
            if model not in contents.models:
                contents.models.append(model)
            return True
    return False


class RngUse:
    """Which global RNG streams the run draws from after training started.

    :meth:`snapshot` stores the states (once, at the first optimizer step); :meth:`used` compares
    with the current states. Reading a state does not advance a generator.
    """

    def __init__(self) -> None:
        self.taken = False
        self._torch: Any = None
        self._cuda: Any = None
        self._numpy: Any = None
        self._python: Any = None

    def snapshot(self, uses_cuda: bool) -> None:
        import random

        import torch

        self.taken = True
        self._torch = torch.get_rng_state()
        self._python = random.getstate()
        np = sys.modules.get("numpy")
        if np is not None:
            try:
                self._numpy = _numpy_state(np)
            except Exception:  # pragma: no cover
                self._numpy = None
        if uses_cuda and torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            try:
                self._cuda = [s.clone() for s in torch.cuda.get_rng_state_all()]
            except Exception:  # pragma: no cover
                self._cuda = None

    def used(self) -> list[str]:
        import random

        import torch

        if not self.taken:
            return []
        out = []
        if self._torch is not None and not torch.equal(self._torch, torch.get_rng_state()):
            out.append("torch")
        if self._cuda is not None:
            try:
                now = torch.cuda.get_rng_state_all()
                if len(now) != len(self._cuda) or any(not torch.equal(a, b) for a, b in zip(self._cuda, now)):
                    out.append("cuda")
            except Exception:  # pragma: no cover
                pass
        np = sys.modules.get("numpy")
        if np is not None and self._numpy is not None:
            try:
                key, rest = self._numpy
                now_key, now_rest = _numpy_state(np)
                if rest != now_rest or not np.array_equal(key, now_key):
                    out.append("numpy")
            except Exception:  # pragma: no cover
                pass
        if self._python is not None and random.getstate() != self._python:
            out.append("python")
        return out


def contents_for(session: Any, obj: Any) -> Contents:
    """The audit of ``obj`` for this save, shared by the TD501-TD504 monitors.

    Kept in the session's :func:`~traindoctor.runtime.live.save_cache`, which the checkpoint
    probe empties after each ``on_checkpoint_save`` emit, so a cached entry never outlives the save
    it belongs to (and never keeps ``obj`` alive).
    """
    from traindoctor.runtime.live import save_cache

    cache = save_cache(session)
    if cache.get("obj") is obj:
        return cast(Contents, cache["contents"])  # stored below, with the object it audits
    models = []
    try:
        models = sorted(session.models, key=lambda m: (type(m).__name__, id(m)))
    except Exception:
        pass
    contents = audit(obj, models)
    cache["obj"] = obj
    cache["contents"] = contents
    return contents


def saved_param_ids(contents: Contents) -> set[int]:
    """Ids of the parameters of the live models found in a checkpoint."""
    out: set[int] = set()
    for model in contents.models:
        try:
            out.update(id(p) for p in model.parameters())
        except Exception:
            continue
    return out


def optimizer_sizes(optimizer: Any) -> tuple[int, ...]:
    return tuple(len(g.get("params", [])) for g in optimizer.param_groups)


def relevant_optimizers(session: Any, contents: Contents) -> list[Any]:
    """Live optimizers that update parameters of the models in the checkpoint."""
    ids = saved_param_ids(contents)
    out = []
    for opt in getattr(session, "optimizers", []) or []:
        try:
            if any(id(p) in ids for g in opt.param_groups for p in g.get("params", [])):
                out.append(opt)
        except Exception:
            continue
    return out


def missing_optimizers(session: Any, contents: Contents) -> list[Any]:
    """Relevant live optimizers whose state is not in the checkpoint (matched by group sizes)."""
    states = list(contents.optimizer_states)
    missing = []
    for opt in relevant_optimizers(session, contents):
        if any(o is opt for o in contents.optimizer_objects):
            continue
        sizes = optimizer_sizes(opt)
        if sizes in states:
            states.remove(sizes)
            continue
        missing.append(opt)
    return missing


def mid_epoch_position(session: Any) -> tuple[int, int] | None:
    """(batches into the epoch, batches per epoch) of a training loader caught mid-epoch, else
    None. A loader only iterated for evaluation is not the run's data position, and one whose
    sampler draws with replacement (``RandomSampler(replacement=True)``, makemore's "infinite"
    loader) has no epoch order to lose: each batch is a fresh random draw, and the RNG state
    (asked for separately) is what a resumed run needs."""
    training = getattr(session, "training_loaders", None)
    infos = training() if callable(training) else getattr(session, "loaders", []) or []
    for info in infos:
        try:
            if not getattr(info, "_epoch_open", False):
                continue
            done = int(getattr(info, "_epoch_batches", 0))
            loader = info.loader
            if getattr(getattr(loader, "sampler", None), "replacement", False) is True:
                continue
            total = len(loader) if loader is not None else 0
            if 0 < done < total:
                return done, total
        except Exception:
            continue
    return None


def _numpy_state(np: Any) -> tuple[Any, tuple[Any, ...]]:
    """NumPy's legacy global state: (key array copy, (position, has_gauss, cached_gaussian))."""
    state = np.random.get_state(legacy=True)
    return state[1].copy(), tuple(state[2:])


# ---------------------------------------------------------------- checkpoint or export
_STATIC_FACTS: dict[tuple[str, int, float], tuple[list[Any], frozenset[int] | None]] = {}


def static_save_facts(filename: str, row: int) -> list[Any] | None:
    """The checker's :class:`~traindoctor.facts.checkpoint.kinds.SaveFacts` for the save(s) at
    ``filename:row`` (the ``torch.save`` line the doctor saw), or None when the source cannot be
    read or holds no save there. Parsed once per file version."""
    facts, _ = _static_view(filename, row)
    return facts or None


def written_together_rows(filename: str, row: int) -> frozenset[int] | None:
    """The lines of the saves the checker counts as one checkpoint with the save at
    ``filename:row`` (``TrainingCheckpoints.written_together``: the files written one after
    another in one statement block), or None when the source cannot tell."""
    _, rows = _static_view(filename, row)
    return rows


def _static_view(filename: str, row: int) -> tuple[list[Any], frozenset[int] | None]:
    import os

    try:
        mtime = os.stat(filename).st_mtime
    except (OSError, ValueError, TypeError):
        return [], None
    key = (filename, row, mtime)
    if key in _STATIC_FACTS:
        return _STATIC_FACTS[key]
    facts: list[Any] = []
    rows: frozenset[int] | None = None
    try:
        from traindoctor.facts.checkpoint.static.index import checkpoint_index
        from traindoctor.static.context import FileContext
        from traindoctor.static.protocols import FACTS_ONLY
        from traindoctor.static.source import parse

        with open(filename, "rb") as fh:
            parsed = parse(filename, fh.read())
        if isinstance(parsed, tuple):
            source, lines, tree = parsed
            idx = checkpoint_index(FileContext(filename, source, tree, FACTS_ONLY, lines))
            for site in idx.saves.sites:
                call = site.call
                if call.lineno <= row <= (getattr(call, "end_lineno", None) or call.lineno):
                    facts.append(idx.checkpoints.save_facts(site))
                    if site.report is call:
                        rows = frozenset(s.call.lineno for s in idx.checkpoints.written_together(site))
    except Exception:  # fail-open: fall back to what the run observed
        facts, rows = [], None
    if len(_STATIC_FACTS) > 256:
        _STATIC_FACTS.clear()
    _STATIC_FACTS[key] = (facts, rows)
    return facts, rows


def save_kind_of(session: Any, contents: Contents, path: str | None, site: Any) -> str:
    """``"checkpoint"`` or ``"export"`` for a save the doctor saw, by the shared definition
    (``traindoctor.facts.checkpoint.kinds``): the checker's facts for that source line, with the
    contents the run actually wrote; without readable source, the contents and the file name."""
    from dataclasses import replace

    from traindoctor.facts.checkpoint.kinds import CHECKPOINT, EXPORT, SaveFacts, export_name, save_kind

    holds = contents.is_training_checkpoint
    found = static_save_facts(site[0], site[1]) if site and site[0] and site[1] else None
    if found:
        kinds = {
            save_kind(
                replace(
                    f, holds_resume_state=holds or f.holds_resume_state, export_name=f.export_name or export_name(path)
                )
            )
            for f in found
        }
        return CHECKPOINT if CHECKPOINT in kinds else EXPORT
    return save_kind(SaveFacts(holds_resume_state=holds, export_name=export_name(path)))


def merged_contents(parts: list[Contents]) -> Contents:
    """What several saved objects hold together (the files of one checkpoint)."""
    out = Contents()
    for part in parts:
        out.models.extend(m for m in part.models if all(m is not seen for seen in out.models))
        out.optimizer_states.extend(part.optimizer_states)
        out.optimizer_objects.extend(part.optimizer_objects)
        out.has_scheduler = out.has_scheduler or part.has_scheduler
        out.has_scaler = out.has_scaler or part.has_scaler
        out.rng |= part.rng
        out.int_keys.extend(part.int_keys)
        out.nodes += part.nodes
    return out


class SeenSave:
    """One ``torch.save`` the run made: what it held, where, and what the monitor read then."""

    __slots__ = ("contents", "extra", "path", "site", "step")

    def __init__(self, contents: Contents, path: str, site: Any, step: int, extra: Any = None) -> None:
        self.contents = contents
        self.path = path
        self.site = site
        self.step = step
        #: What a monitor read at the save (the RNG streams in use, the data position).
        self.extra = extra


class WrittenTogether:
    """The saves made since the last training step: the files of one checkpoint.

    A script that writes its checkpoint as several files one after another (``netG.pt``,
    ``optG.pt``, ``netD.pt``, ``optD.pt``) saves one checkpoint: judged file by file, the weights
    file misses the optimizer that the next file holds. The TD501/TD504 monitors collect the
    saves here and judge them together at the next ``backward()`` or optimizer step (or the run's
    end), as the checker judges the saves of one statement block; the finding goes to the first
    file that holds weights.
    """

    def __init__(self) -> None:
        self.saves: list[SeenSave] = []

    def add(self, save: SeenSave) -> list[SeenSave]:
        """Collect ``save``; the saves collected before it when it starts another checkpoint (the
        checker puts its line in another statement block: a best-so-far copy under its own
        ``if``), to be judged now; [] otherwise."""
        done: list[SeenSave] = []
        if self.saves and (
            not _same_checkpoint(self.saves[0], save) or any(_overlap(s.contents, save.contents) for s in self.saves)
        ):
            done = self.take()
        self.saves.append(save)
        return done

    def take(self) -> list[SeenSave]:
        """The saves collected so far, leaving none."""
        saves, self.saves = self.saves, []
        return saves


def _same_checkpoint(first: SeenSave, save: SeenSave) -> bool:
    """Whether ``save`` is another file of the checkpoint whose first file is ``first``: saves
    on the same line are (one helper called twice), saves in two source files are not, and
    otherwise the checker's grouping of the lines decides (without readable source, the saves
    between two training steps are one checkpoint)."""
    a, b = first.site, save.site
    if not a or not b or not a[0] or not b[0] or not a[1] or not b[1]:
        return True
    if a[0] != b[0]:
        return False
    if a[1] == b[1]:
        return True
    rows = written_together_rows(a[0], a[1])
    return rows is None or b[1] in rows


def _overlap(a: Contents, b: Contents) -> bool:
    """Whether two saved objects hold some of the same state: a model's weights, an optimizer's
    state (matched by object, or by its groups' sizes), RNG states."""
    if any(m is n for m in a.models for n in b.models):
        return True
    if any(o is p for o in a.optimizer_objects for p in b.optimizer_objects):
        return True
    if set(a.optimizer_states) & set(b.optimizer_states):
        return True
    return bool(a.rng & b.rng)
