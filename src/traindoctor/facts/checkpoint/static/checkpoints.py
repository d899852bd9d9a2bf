"""Which saves are training checkpoints, and whether a save is a checkpoint or an export.

A save that holds optimizer state is a training checkpoint wherever it is; a model-only save in
the training loop of a file that saves optimizer state nowhere is one too (TD501), unless it is
an export (:mod:`traindoctor.facts.checkpoint.kinds` defines the two from the facts gathered
here: :meth:`TrainingCheckpoints.save_facts`). Test modules' saves are fixtures, not checkpoints.
One object saved twice nearby (``last.pth`` and ``ep{epoch}.pth``) counts once.
"""

from __future__ import annotations

import ast
import re
from functools import cached_property
from typing import TYPE_CHECKING

from traindoctor.facts.checkpoint import kinds
from traindoctor.facts.checkpoint.static.base import FUNCTION_DEFS, IndexPart, TrainingObjects, position
from traindoctor.facts.checkpoint.static.contents import SaveContents
from traindoctor.facts.checkpoint.static.loops import TrainingLoops
from traindoctor.facts.checkpoint.static.paths import CheckpointPaths
from traindoctor.facts.checkpoint.static.saves import Saves, SaveSite
from traindoctor.facts.checkpoint.static.vocabulary import kind_from_name
from traindoctor.static.names import dotted, receiver
from traindoctor.static.vocab import DATA, MODEL, OPTIMIZER, RNG_ANY, RNG_KINDS, SCALER, SCHEDULER

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.context import FileContext

#: Keys of a step/epoch counter saved beside the weights: the save is meant to be resumed from.
_RX_COUNTER_KEY = re.compile(r"^(epochs?|steps?|global_steps?|iters?|iterations?|iter_num|it)$")
#: Keys that name a training position in any spelling (``EPOCHS_RUN``, ``cur_epoch``,
#: ``global_step_count``): a save holding one beside the weights is meant to be resumed from.
_RX_POSITION_WORD = re.compile(r"(^|_)(epochs?|steps?|iters?|iterations?)(_|$)")
#: What identifies the object a save writes: (name, id of its scope, where the binding that
#: reaches the save starts or the positions of all its bindings, ids of the loops around the save).
_ObjectKey = tuple[str, int, tuple[int, int] | tuple[tuple[int, int], ...], tuple[int, ...]]


class TrainingCheckpoints(IndexPart):
    """The saves of one file that a training run resumes from."""

    def __init__(
        self,
        objects: TrainingObjects,
        loops: TrainingLoops,
        contents: SaveContents,
        saves: Saves,
        paths: CheckpointPaths,
    ) -> None:
        super().__init__(objects)
        self.loops = loops
        self.contents = contents
        self.saves = saves
        self.paths = paths

    def training_checkpoints(self) -> list[SaveSite]:
        """Saves that are training checkpoints: with optimizer state, or TD501's model-only ones."""
        if self.saves.complete_saves or self.in_test_code:
            return []
        full = [s for s in self.saves.sites if s.is_full]
        return self._first_of_repeats(full + self.model_only_in_loop())

    def resume_checkpoints(self) -> list[SaveSite]:
        """Training checkpoints that hold resume state beside the weights (an optimizer, scheduler,
        scaler, sampler, RNG state or a step/epoch counter): those whose missing scheduler, scaler
        or RNG state TD502-TD504 report. A bare weights save in the loop is TD501's alone (its fix,
        a full-state checkpoint, covers the rest), as the doctor judges the save it sees; a
        best-so-far save is left out where a periodic checkpoint is there to carry the finding."""
        sites = [
            s
            for s in self.training_checkpoints()
            if s.is_full
            or self.holds_resume_state(s)
            or any(p.key is not None and _RX_POSITION_WORD.search(p.key.lower()) for p in s.saved.pieces)
        ]
        # A save written once after training and never read back here is the run's result (the
        # next stage reads its weights), no resume point.
        sites = [s for s in sites if self.paths.read_back(s) or not self.after_training(s)]
        # A best-so-far save (``if acc >= best: save(..., "best_model.pth")``) beside the periodic
        # checkpoint the run resumes from: the same omission, said once, at the periodic one.
        periodic = [s for s in sites if not self.save_facts(s).quality_guarded]
        return periodic or sites

    def rng_checkpoints(self) -> list[SaveSite]:
        """The :meth:`resume_checkpoints` whose random state a resumed run needs (TD504): not a
        save in a helper this file never calls (``Trainer.save``, called by a script only when the
        metric improves) that keeps no training position and is not read back here. How often it
        runs is decided elsewhere, and a run resumed from it does not know where it was: it
        cannot draw the same random numbers again anyway."""
        out: list[SaveSite] = []
        for site in self.resume_checkpoints():
            if self._uncalled(site) and not self._holds_position(site) and not self.paths.read_back(site):
                continue
            first = self.first_written(site)
            if all(first is not s for s in out):
                out.append(first)
        return out

    def _last_iteration_only(self, node: ast.AST) -> bool:
        """``node`` runs in the training loop only on its last pass: an ``if`` between it and the
        loop tests a last-step flag (``if last_step:``) or compares a step/epoch with the end
        (``if epoch == args.epochs - 1:``), with no ``or`` that lets it run at other steps too."""
        ctx = self.ctx
        child = node
        for anc in ctx.ancestors(node):
            if isinstance(anc, (*FUNCTION_DEFS, ast.For, ast.AsyncFor, ast.While)):
                return False
            if isinstance(anc, ast.If) and any(child is b for b in anc.body) and _tests_last_pass(anc.test):
                return True
            child = anc
        return False

    def _uncalled(self, site: SaveSite) -> bool:
        """The save sits in a function (or method) that nothing in this file calls, outside any
        loop and framework hook: how often it runs is decided elsewhere."""
        fn = self.ctx.function_of(site.call)
        return (
            isinstance(fn, FUNCTION_DEFS)
            and site.contexts == [site.call]
            and not site.in_training_loop
            and not self.ctx.enclosing_loops(site.call)
            and not self.objects.callers_of(fn)
        )

    def after_training(self, site: SaveSite) -> bool:
        """The save runs once, after the training loop of its function (every call of a helper
        that makes it does): the run's final result, which the catalog calls an export unless a
        resume path reads it back."""
        if site.in_training_loop:
            return all(self._last_iteration_only(c) for c in site.contexts)
        ctx = self.ctx
        fn = ctx.function_of(site.call)
        callers = self.objects.callers_of(fn) if isinstance(fn, FUNCTION_DEFS) else []
        once = fn is None or (bool(callers) and not any(ctx.enclosing_loops(c) for c in callers))
        if self.loops.after_training(site.call, once):
            return True
        return site.contexts != [site.call] and all(
            self.loops.after_training(c, ctx.function_of(c) is None) for c in site.contexts
        )

    def holds_resume_state(self, site: SaveSite) -> bool:
        """Whether a save holds something a resumed run reads besides the weights."""
        saved = site.saved
        resume_kinds = (OPTIMIZER, SCHEDULER, SCALER, DATA, RNG_ANY, *RNG_KINDS)
        return any(saved.has(k) for k in resume_kinds) or any(
            p.key is not None and _RX_COUNTER_KEY.match(p.key.lower()) for p in saved.pieces
        )

    def left_out(self, kind: str) -> list[tuple[SaveSite, list[str]]]:
        """Training checkpoints that save the state of some of the file's objects of ``kind``
        (optimizers, schedulers, scalers) but not of another it builds (a GAN's ``sched_G``
        saved, ``sched_D`` not): (save, missing names). Judged by name only where every state of
        ``kind`` the save holds is ``<name>.state_dict()`` of an object the file builds under
        that name, among the objects the save's own class builds when it is a method; plain SGD
        without momentum keeps no state and is never missing."""
        built = [(n, c) for n, c in self.objects.exists(kind) if not n.startswith("<")]
        if not built or self.saves.complete_saves or self.in_test_code:
            return []
        stateful = {n for n, c in built if kind != OPTIMIZER or not self.objects.stateless(c)}
        everything = built
        out: list[tuple[SaveSite, list[str]]] = []
        reported: set[int] = set()
        for site in self._holding_checkpoints(kind):
            together = self.written_together(site)
            first = together[0]
            if id(first) in reported:
                continue  # another file of a checkpoint already judged as a whole
            built = self._built_beside(site, everything)
            pieces = [p for s in together for p in s.saved.pieces if p.kind == kind]
            saved: set[str] = set()
            for piece in pieces:
                node = piece.node
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "state_dict"
                ):
                    saved = set()
                    break
                saved.add(dotted(node.func.value) or "")
            # (an object of the kind the file does not build, an EMA schedule ``ema_sched =
            # EMAWarmup(...)``, still counts as one of several: the built one is left out)
            if not saved or len(saved | {n for n, _ in built}) < 2:
                continue
            if not all(n in {b for b, _ in built} or self._constructed_apart(n, kind) for n in saved):
                continue
            missing = [n for n, _ in built if n not in saved and n in stateful]
            reported.add(id(first))
            if missing:
                out.append((first, missing))
        return out

    def _built_beside(self, site: SaveSite, built: list[tuple[str, ast.Call]]) -> list[tuple[str, ast.Call]]:
        """The objects of ``built`` that the save could hold: those its class builds when it is a
        method (a file of several trainer classes, each with its own optimizers), else those no
        class builds."""
        ctx = self.ctx
        cls = ctx.enclosing(site.call, ast.ClassDef)
        if cls is not None:
            return [(n, c) for n, c in built if ctx.within(c, cls)]
        return [(n, c) for n, c in built if ctx.enclosing(c, ast.ClassDef) is None]

    def _constructed_apart(self, name: str, kind: str) -> bool:
        """``name`` is named like ``kind`` and bound in the file only to constructions of a class
        (``ema_sched = EMAWarmup(power=0.75)``): an object of its own, no alias of a built one
        (``self.lr_scheduler = lr_scheduler``) and no object made elsewhere."""
        if kind_from_name(name) != kind:
            return False
        values = []
        for node in self.ctx.of(ast.Assign):
            for target in node.targets:
                if dotted(target) == name:
                    values.append(node.value)
                elif isinstance(target, ast.Tuple) and any(dotted(t) == name for t in target.elts):
                    return False
        # (a class constructed, ``EMAWarmup(...)``: a factory may hand back an object built elsewhere)
        return bool(values) and all(
            isinstance(v, ast.Call) and (dotted(v.func) or "").rsplit(".", 1)[-1][:1].isupper() for v in values
        )

    def missing_beside_best(self, kind: str) -> list[SaveSite]:
        """Periodic checkpoints in the training loop (weights and resume state, no best-so-far
        guard, no export name) without a state of ``kind`` that only the file's best-so-far or
        export saves hold (``checkpoint.pth`` without the optimizer, ``best_model.pth`` with it):
        the file-level view would take the export's state for the checkpoint's."""
        if self.saves.complete_saves or self.saves.opaque_saves or self.in_test_code:
            return []
        if kind == SCHEDULER and self.saves._schedule_position_set_by_hand:
            return []
        holders = [
            s
            for s in self.saves.sites
            if s.saved.may_hold(kind) and not self._passes_through(s) and not self.saves.copies_load(s)
        ]
        if not holders or any(not self._export_like(s) for s in holders):
            return []
        sites = [
            s
            for s in self.saves.sites
            if s.in_training_loop
            and not s.saved.is_opaque
            and not s.saved.may_hold(kind)
            and not self._passes_through(s)
            and self._holds_weights(s)
            and self.holds_resume_state(s)
            and not self._export_like(s)
        ]
        return self._first_of_repeats(sites)

    def _export_like(self, site: SaveSite) -> bool:
        """A best-so-far save, one whose path says export (``best``, ``final``, ...), or one
        written once after training."""
        facts = self.save_facts(site)
        return facts.quality_guarded or facts.export_name or self.after_training(site)

    def _holding_checkpoints(self, kind: str) -> list[SaveSite]:
        """The training checkpoints, and the saves that hold weights beside a state of ``kind``
        and are no export (a GAN's ``{"GAN": ..., "G_scaler": ...}`` written by a ``save()``
        method): a save that carries a scheduler or scaler is meant to be resumed from."""
        sites = self.training_checkpoints()
        if kind == OPTIMIZER:
            return sites
        seen = {id(s) for s in sites}
        for site in self.saves.sites:
            if id(site) in seen or not site.saved.has(kind) or not self._holds_weights(site):
                continue
            if not self._export_like(site):
                sites.append(site)
        return self._first_of_repeats(sites)

    def left_out_by_helper(self, kind: str) -> list[tuple[SaveSite, str]]:
        """Saves in a checkpoint helper that is handed an optimizer (scheduler, scaler) as a
        parameter, or in a method of a class whose attribute holds one (``self.optimizer`` of a
        trainer), but writes the weights and the training position without its state
        (``def save_checkpoint(model, optimizer, epoch, path): torch.save({"model": ...,
        "epoch": epoch}, path)``): (save, parameter or ``self.<attribute>`` name).

        The helper may sit in a module that builds nothing (``utils.py``); what it is handed says
        what it should save. Silent where any save of the file may hold ``kind``, for a save whose
        object is unknown, for exports (a path that says ``best``/``final``, a best-so-far guard)
        and for a save read at the callers of a local helper (those callers are judged instead)."""
        if self.saves.complete_saves or self.saves.opaque_saves or self.in_test_code:
            return []
        if any(
            s.saved.may_hold(kind)
            for s in self.saves.sites
            if not self._passes_through(s) and not self.saves.copies_load(s)
        ):
            return []
        if kind == SCHEDULER and self.saves.may_hold_anywhere(SCHEDULER):
            return []  # (the schedule's position set by hand)
        config = self.ctx.parsed_args_names
        out: list[tuple[SaveSite, str]] = []
        for site in self.saves.sites:
            fn = self.ctx.function_of(site.call)
            if site.report is not site.call or not isinstance(fn, FUNCTION_DEFS):
                continue
            saved = site.saved
            if saved.is_opaque or not self._holds_weights(site) or saved.may_hold(kind):
                continue
            names = [p.arg for p in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)]
            handed = [n for n in names if n not in ("self", "cls") and n not in config and kind_from_name(n) == kind]
            handed += self._held_by_self(fn, kind)
            if not handed or not self._holds_position(site):
                continue
            if self._export_like(site):
                continue
            out.append((site, handed[0]))
        return self._pairs_first_of_repeats(out)

    def _held_by_self(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, kind: str) -> list[str]:
        """``self.<attribute>`` names of ``kind`` that the class of the method ``fn`` stores
        (``self.optimizer = build_optimizer(...)``, ``self.model, self.optimizer = model,
        optimizer``): what the object that saves holds. Judged by the stored value where the
        file builds it, else by the attribute's name."""
        cls = self.ctx.parent(fn)
        args = [*fn.args.posonlyargs, *fn.args.args]
        if not isinstance(cls, ast.ClassDef) or not args or args[0].arg != "self":
            return []
        out: list[str] = []
        for node in ast.walk(cls):
            if not isinstance(node, (ast.Assign, ast.AnnAssign)):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                pairs: list[tuple[ast.expr, ast.expr | None]] = [(target, node.value)]
                if isinstance(target, ast.Tuple):
                    values = node.value.elts if isinstance(node.value, ast.Tuple) else [None] * len(target.elts)
                    if len(values) != len(target.elts):
                        values = [None] * len(target.elts)
                    pairs = list(zip(target.elts, values))
                for t, value in pairs:
                    if not (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"):
                        continue
                    name = f"self.{t.attr}"
                    if name in out:
                        continue
                    told = self.objects.classify(value) if isinstance(value, ast.Call) else None
                    if (told == kind and told != MODEL) or (told in (None, MODEL) and kind_from_name(t.attr) == kind):
                        out.append(name)
        if kind == SCHEDULER:
            # A schedule stepped with an explicit epoch (``step(epoch)``), or stepped elsewhere (a
            # subclass in another module), may be put back from the saved epoch: only a schedule
            # this file advances by itself is lost.
            steps = self.ctx.method_calls("step")
            out = [n for n in out if any(dotted(receiver(c)) == n and not c.args and not c.keywords for c in steps)]
        return out

    def _holds_weights(self, site: SaveSite) -> bool:
        """Model weights, or a value saved under a key that names them."""
        return bool(site.saved.weight_keys())

    def _passes_through(self, site: SaveSite) -> bool:
        """A save wrapper's own ``torch.save(*args, **kwargs)`` (or of its parameter): what it
        writes is judged at the wrapper's calls."""
        obj = site.obj
        if not isinstance(self.ctx.function_of(site.call), FUNCTION_DEFS):
            return False
        if obj is None:
            return any(isinstance(a, ast.Starred) for a in site.call.args) or any(
                k.arg is None for k in site.call.keywords
            )
        return isinstance(obj, ast.Name) and self.objects.is_param_only(obj)

    def _holds_position(self, site: SaveSite) -> bool:
        """A step/epoch counter (any spelling) saved beside the weights."""
        return any(
            p.key is not None and (_RX_COUNTER_KEY.match(p.key.lower()) or _RX_POSITION_WORD.search(p.key.lower()))
            for p in site.saved.pieces
        )

    def _pairs_first_of_repeats(self, pairs: list[tuple[SaveSite, str]]) -> list[tuple[SaveSite, str]]:
        """``pairs`` keeping the sites :meth:`_first_of_repeats` keeps."""
        kept = {id(s) for s in self._first_of_repeats([s for s, _ in pairs])}
        return [(s, n) for s, n in pairs if id(s) in kept]

    def model_only_in_loop(self) -> list[SaveSite]:
        """Model-weight saves in the training loop of a training file with no optimizer state
        saved anywhere, that are checkpoints rather than exports (see ``traindoctor.facts.checkpoint.kinds``).
        Several weight files written together (``encoder_epoch_{n}.pth`` and ``decoder_epoch_{n}.pth``
        by one function, in the same loops) are one checkpoint: its first save stands for it, the
        others are :meth:`written_with` it."""
        return self._model_only_groups[0]

    def written_with(self, site: SaveSite) -> list[SaveSite]:
        """The other weight files of the checkpoint whose first save is ``site`` (see
        :meth:`model_only_in_loop`)."""
        return self._model_only_groups[1].get(id(site), [])

    @cached_property
    def _model_only_groups(self) -> tuple[list[SaveSite], dict[int, list[SaveSite]]]:
        if not self.loops.trains or self.saves.may_hold_anywhere(OPTIMIZER) or self.in_test_code:
            return [], {}
        sites = self._first_of_repeats(
            [
                s
                for s in self.saves.sites
                if s.in_training_loop
                and s.saved.has(MODEL)
                and not s.saved.may_hold(OPTIMIZER)
                and self.save_kind(s) == kinds.CHECKPOINT
            ]
        )
        firsts: dict[int, SaveSite] = {}
        out: list[SaveSite] = []
        together: dict[int, list[SaveSite]] = {}
        for site in sites:
            key = id(self.first_written(site))  # copies of one model's weights stay apart, as at run time
            first = firsts.get(key)
            if first is None:
                firsts[key] = site
                out.append(site)
            else:
                together.setdefault(id(first), []).append(site)
        return out, together

    def _group_key(self, site: SaveSite) -> tuple[int, ...]:
        """What the saves of one checkpoint written as several files share: the statement block
        they sit in (``torch.save(netG...)``, ``torch.save(optG...)``, ... one after the other),
        the calls of the helper they sit in (none for a save written where it runs) and the loops
        around them. A save under its own ``if`` (a best-so-far copy) is another block."""
        ctx = self.ctx
        helper = () if site.contexts == [site.call] else tuple(id(c) for c in site.contexts)
        return (
            _block_of(ctx, site.report),
            *helper,
            -1,
            *(id(loop) for loop in ctx.enclosing_loops(site.call)),
        )

    def written_together(self, site: SaveSite) -> list[SaveSite]:
        """The saves of the checkpoint ``site`` belongs to, in source order (``site`` alone when
        it is written as one file): the files of one checkpoint are judged together. Files that
        hold the same state (the same model's weights, the same optimizer, RNG states in both)
        are copies of a checkpoint (``last.pt`` and ``step_100.pt``), each judged alone."""
        return self._groups.get(id(site), [site])

    def first_written(self, site: SaveSite) -> SaveSite:
        """The first save of the checkpoint ``site`` belongs to: where its findings go."""
        return self.written_together(site)[0]

    @cached_property
    def _groups(self) -> dict[int, list[SaveSite]]:
        current: dict[tuple[int, ...], list[SaveSite]] = {}
        out: dict[int, list[SaveSite]] = {}
        for site in sorted(self.saves.sites, key=lambda s: (s.report.lineno, s.report.col_offset)):
            if site.report is not site.call:
                continue
            key = self._group_key(site)
            group = current.get(key)
            if group is None or any(_overlap(site, other) for other in group):
                group = current[key] = []
            group.append(site)
            out[id(site)] = group
        return out

    @cached_property
    def in_test_code(self) -> bool:
        """A test module (``test_*.py``, ``*_test.py``): its saves are fixtures that check a
        save/load round trip, not checkpoints a training run resumes from. Judged by the file's
        own name only: training scripts kept under a ``tests/`` folder as fixtures still count."""
        from traindoctor.facts.data.static import is_test_module

        return is_test_module(self.ctx.filename)

    def optimizer_for(self, site: SaveSite, default: str) -> str:
        """The name of the optimizer that updates the model this save writes (``optimizerG``
        for ``netG.state_dict()`` when ``optimizerG = Adam(netG.parameters())``), else
        ``default``: with two models and two optimizers, advice must name the right one."""
        models = {n for p in site.saved.pieces if p.kind == MODEL for n in _referenced(p.node)}
        if not models:
            return default
        matches = []
        for name, call in self.objects.exists(OPTIMIZER):
            params = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "params"), None)
            if params is not None and not name.startswith("<") and models & _referenced(params):
                matches.append(name)
        return matches[0] if len(matches) == 1 else default

    def save_kind(self, site: SaveSite) -> str:
        """``"checkpoint"`` or ``"export"`` (the shared definition in ``traindoctor.facts.checkpoint.kinds``)."""
        return kinds.save_kind(self.save_facts(site))

    def save_facts(self, site: SaveSite) -> kinds.SaveFacts:
        """What :func:`~traindoctor.facts.checkpoint.kinds.save_kind` judges ``site`` by (the doctor
        asks the same for the save it saw)."""
        holds = self.holds_resume_state(site)
        guard_names: list[str] = []
        for node in site.contexts:
            guard_names.extend(self._guard_names(node))
        return kinds.SaveFacts(
            holds_resume_state=holds,
            read_back=self.paths.read_back(site),
            quality_guarded=kinds.quality_guard(guard_names)
            or any(self._running_best_guard(node) for node in site.contexts),
            export_name=kinds.export_name(self._path_words(site.path)),
            in_training_loop=site.in_training_loop,
        )

    def _guard_names(self, node: ast.AST) -> list[str]:
        """Names read by the tests of the ``if`` statements whose body holds ``node``."""
        ctx = self.ctx
        names: list[str] = []
        child = node
        for anc in ctx.ancestors(node):
            if isinstance(anc, FUNCTION_DEFS):
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
            if isinstance(anc, FUNCTION_DEFS):
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

    def _path_words(self, path: ast.expr | None) -> list[str]:
        """The strings and names a path is built from (``"runs"``, ``best_path``, ...)."""
        if path is None:
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

    def _first_of_repeats(self, sites: list[SaveSite]) -> list[SaveSite]:
        """Sites in source order, keeping only the first save of one object saved again nearby.

        ``save(ckpt, "last.pth")`` followed by ``save(ckpt, f"ep{epoch}.pth")`` writes one dict
        twice: one mistake, so one finding (at the first save). Two saves count as the same
        object when both save the same name, bound by the same assignment, in the same function
        and the same loops (a save in an ``if`` beside the first still counts).
        """
        ordered = sorted(sites, key=lambda s: (s.report.lineno, s.report.col_offset))
        seen: set[_ObjectKey] = set()
        reports: set[int] = set()
        out: list[SaveSite] = []
        for site in ordered:
            if site.report is site.call and site.contexts != [site.call]:
                # (one helper save read at each of its callers: one finding, at the save)
                if id(site.call) in reports:
                    continue
                reports.add(id(site.call))
            key = self._saved_object_key(site)
            if key is not None and key in seen:
                continue
            if key is not None:
                seen.add(key)
            out.append(site)
        return out

    def _saved_object_key(self, site: SaveSite) -> _ObjectKey | None:
        """What identifies the object a save writes, or None when it is not one plain name."""
        obj = site.obj
        if site.report is not site.call or not isinstance(obj, ast.Name):
            return None
        ctx = self.ctx
        bound, since = self.contents.reaching(obj)
        if not bound or any(b is None for b in bound):
            return None
        binding = since if since is not None else tuple(position(b) for b in bound if b is not None)
        loops = tuple(id(l) for l in ctx.enclosing_loops(site.call))
        return (obj.id, id(ctx.scope_of(obj)), binding, loops)


def _state_of(site: SaveSite) -> dict[str, set[str]]:
    """What a save holds, by kind: the models' and optimizers' names, ``rng`` for RNG states."""
    out: dict[str, set[str]] = {MODEL: set(), OPTIMIZER: set(), "rng": set()}
    for piece in site.saved.pieces:
        if piece.kind in (MODEL, OPTIMIZER):
            out[piece.kind] |= _referenced(piece.node) or {"?"}
        elif piece.kind in (RNG_ANY, *RNG_KINDS):
            out["rng"].add("rng")
    return out


def _overlap(a: SaveSite, b: SaveSite) -> bool:
    """Whether two saves hold some of the same state (so they are two copies, not two parts)."""
    sa, sb = _state_of(a), _state_of(b)
    return any(sa[k] & sb[k] for k in sa)


def _referenced(expr: ast.AST) -> set[str]:
    """The names and attribute chains ``expr`` reads (``self.G`` in ``self.G.state_dict()``),
    without a bare ``self``/``cls``: two methods' models are told apart by their attributes."""
    out = set()
    for node in ast.walk(expr):
        if isinstance(node, (ast.Name, ast.Attribute)):
            text = dotted(node)
            if text and text not in ("self", "cls"):
                out.add(text)
    return out


def _block_of(ctx: FileContext, node: ast.AST) -> int:
    """The id of the statement list holding the statement of ``node`` (a body, an ``else``)."""
    child: ast.AST = node
    for anc in ctx.ancestors(node):
        if isinstance(child, ast.stmt):
            for field in ("body", "orelse", "finalbody", "handlers"):
                block = getattr(anc, field, None)
                if isinstance(block, list) and any(x is child for x in block):
                    return id(block)
        child = anc
    return 0


#: A flag that says the loop is on its last pass (``last_step``, ``is_last_epoch``, ``final_iter``).
_RX_LAST_FLAG = re.compile(r"^(is_)?(last|final)(_(step|epoch|iter|iteration|batch|round))?$")
#: A name that counts the loop's position, and one that says where it ends.
_RX_COUNTER = re.compile(r"(^|_)(epochs?|steps?|iters?|iterations?|it|i|e|ep|step_num|iter_num)$")
_RX_END = re.compile(r"(^|_)(epochs|num_\w+|max_\w+|total_\w+|n_\w+|end_\w+|\w+_steps|\w+_iters|iterations)$")


def _tests_last_pass(test: ast.expr) -> bool:
    """Whether an ``if`` test is true only on the loop's last pass (see
    :meth:`TrainingCheckpoints._last_iteration_only`): a last-step flag or ``counter == end``
    (``- 1`` and ``+ 1`` allowed), alone or in an ``and``."""
    if isinstance(test, ast.BoolOp):
        return isinstance(test.op, ast.And) and any(_tests_last_pass(v) for v in test.values)
    if isinstance(test, (ast.Name, ast.Attribute)):
        text = dotted(test)
        return text is not None and bool(_RX_LAST_FLAG.match(text.rsplit(".", 1)[-1].lower()))
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq):
        sides = [_names_in(test.left), _names_in(test.comparators[0])]
        return any(
            any(_RX_COUNTER.search(n) for n in a) and any(_RX_END.search(n) for n in b) for a, b in (sides, sides[::-1])
        )
    return False


def _names_in(expr: ast.expr) -> list[str]:
    """The last parts of the names an expression reads (``args.epochs - 1`` -> ``["epochs"]``)."""
    return [
        (n.id if isinstance(n, ast.Name) else n.attr).lower()
        for n in ast.walk(expr)
        if isinstance(n, (ast.Name, ast.Attribute))
    ]


def _value_key(node: ast.AST) -> str | None:
    """Source text of a name, attribute or subscript (``best``, ``self.best_acc``), else None."""
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        try:
            return ast.unparse(node)
        except Exception:  # pragma: no cover - unparse of a valid tree
            return None
    return None
