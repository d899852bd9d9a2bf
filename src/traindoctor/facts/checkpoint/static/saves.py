"""Where a file saves checkpoints and what each save holds, one :class:`SaveSite` per save.

Saves are ``torch.save`` (and a few same-signature wrappers), ``torch.distributed.checkpoint``
saves, ``accelerator.save``/``fabric.save``; a save in a local helper whose parameter is what gets
saved is read at each caller. Saves that hold everything (``traindoctor.checkpoint.save``,
``accelerator.save_state``) and unknown calls that may save training state are kept apart.
The file-level view (:meth:`Saves.may_hold_anywhere`) unions every save, so a model-only "best"
export next to a full checkpoint elsewhere in the file is never mistaken for the training
checkpoint.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from traindoctor.facts.checkpoint.static.base import (
    FUNCTION_DEFS,
    IndexPart,
    TrainingObjects,
    arg_of,
    callee_name,
    end_position,
    position,
)
from traindoctor.facts.checkpoint.static.contents import Piece, SaveContents, Saved
from traindoctor.facts.checkpoint.static.loops import TrainingLoops
from traindoctor.facts.checkpoint.static.vocabulary import (
    COMPLETE_SAVES,
    DCP_LOADS,
    DCP_SAVES,
    LOAD_FUNCS,
    RX_READS_CHECKPOINT,
    RX_SAVE_WORD,
    SAVE_FUNCS,
    SAVE_WRAPPERS,
)
from traindoctor.static.names import dotted, receiver
from traindoctor.static.vocab import OPTIMIZER, RNG_KINDS, SCALER, SCHEDULER

if TYPE_CHECKING:
    from traindoctor.facts.checkpoint.static.project import SaveHelper
    from traindoctor.static.context import FileContext
    from traindoctor.static.project import Place

#: Methods that save the whole training state of a framework object (``accelerator.save_state``).
_COMPLETE_METHODS = {"save_state": ("accelerator",), "save_checkpoint": ("trainer", "engine", "deepspeed")}


@dataclass
class SaveSite:
    """One save of a checkpoint, seen from where it matters.

    ``call`` is the ``torch.save``; ``report`` is where findings go (the caller of a local helper
    when the caller decides what is saved); ``contexts`` are the nodes whose position in the
    training loop counts (the save itself, or every call of the helper function it sits in).
    """

    call: ast.Call
    report: ast.Call
    contexts: list[ast.Call]
    obj: ast.expr | None
    path: ast.expr | None
    saved: Saved
    in_training_loop: bool = False
    mid_epoch: bool = False
    #: The save of the project helper that writes the file, when ``call`` is a call of one
    #: (``utils.save_checkpoint(state, filename)`` saving the dict built here).
    via: Place | None = None

    @property
    def is_full(self) -> bool:
        """Holds optimizer state: a training checkpoint whatever its location."""
        return self.saved.has(OPTIMIZER)


def after_training_loop(ctx: FileContext, node: ast.AST, site: SaveSite) -> bool:
    """Whether ``node`` comes after a loop around the save, in the same function.

    Such a load reads the finished result back (evaluation, export); resume reads happen
    before the training loop or in a function of their own.
    """
    scope = ctx.scope_of(node)
    for c in site.contexts:
        for loop in ctx.enclosing_loops(c):
            if ctx.scope_of(loop) is scope and position(node) > end_position(loop):
                return True
    return False


class Saves(IndexPart):
    """Every save of one file: its sites, complete saves and opaque saves, and its loads."""

    def __init__(self, objects: TrainingObjects, loops: TrainingLoops, contents: SaveContents) -> None:
        super().__init__(objects)
        self.loops = loops
        self.contents = contents
        #: One site per save whose object the index reads (a helper's save: one per caller).
        self.sites: list[SaveSite] = []
        #: Saves that hold everything (traindoctor.checkpoint.save, accelerator.save_state, ...).
        self.complete_saves: list[ast.Call] = []
        #: Unknown saves that may hold training state (external ``save_checkpoint(model, opt)``).
        self.opaque_saves: list[ast.AST] = []
        self._save_calls = self._find_save_calls()
        #: ``torch.load`` calls, and ``torch.distributed.checkpoint`` loads.
        self.loads: list[ast.Call] = list(self.ctx.calls_to(*LOAD_FUNCS))
        self.dcp_loads: list[ast.Call] = list(self.ctx.calls_to(*DCP_LOADS))
        #: Saves by project helpers that build their own dict, as their summary tells it (read by
        #: the resume only: the helper's own file judges what it saves).
        self.project_sites: list[SaveSite] = []
        self._through_ids: set[int] = set()

    @property
    def found_any(self) -> bool:
        """Whether the file saves or loads a checkpoint at all (if not, the index stays empty)."""
        return bool(self._save_calls or self.loads or self.complete_saves or self.dcp_loads or self._project_calls)

    @cached_property
    def _project_calls(self) -> list[tuple[ast.Call, SaveHelper, bool]]:
        """Calls of project helpers that save (asked once per file)."""
        from traindoctor.facts.checkpoint.static.project import project_save_calls

        return project_save_calls(self.ctx)

    @property
    def save_calls(self) -> list[tuple[ast.Call, ast.expr | None, ast.expr | None]]:
        """(call, saved object, path) of every save the file makes itself, in source order."""
        return self._save_calls

    def find(self) -> None:
        """Read every save, once the file's training objects are known."""
        through = self._find_project_saves()
        self._find_other_saves()
        for call, obj, path in self._save_calls:
            self._add_sites(call, obj, path)
        for call, obj, path, place in through:
            before = len(self.sites)
            self._add_sites(call, obj, path)
            for site in self.sites[before:]:
                site.via = place

    def _find_project_saves(self) -> list[tuple[ast.Call, ast.expr | None, ast.expr | None, Place]]:
        """Calls of project helpers that save (see :mod:`~traindoctor.facts.checkpoint.static.project`):
        one that saves the dict it is handed is a save of that dict, here (returned: call, object,
        path, the helper's save); one that builds its own dict is a save whose contents its
        summary tells (``project_sites``, for the resume to compare against)."""
        through: list[tuple[ast.Call, ast.expr | None, ast.expr | None, Place]] = []
        known = {id(c) for c, _, _ in self._save_calls}
        for call, helper, method in self._project_calls:
            if id(call) in known:
                continue
            if helper.saves_params:
                obj = helper.saved_object(call, method)
                path = helper.argument(call, helper.path_param, method)
                if obj is not None:
                    through.append((call, obj, path, helper.place))
                    known.add(id(call))
            elif helper.written:
                pieces = [Piece(kind, key, call) for key, kind in helper.written]
                site = SaveSite(call, call, [call], None, None, Saved(pieces), via=helper.place)
                self._append(site, into=self.project_sites)
        self._through_ids = known
        return through

    def _find_save_calls(self) -> list[tuple[ast.Call, ast.expr | None, ast.expr | None]]:
        """(call, saved object, path) of every save, in source order; fills ``complete_saves``."""
        ctx = self.ctx
        out: list[tuple[ast.Call, ast.expr | None, ast.expr | None]] = []
        for call in ctx.calls_to(*SAVE_FUNCS):
            out.append((call, arg_of(ctx, call, "obj", 0), arg_of(ctx, call, "f", 1)))
        for call in ctx.calls_to(*DCP_SAVES):
            out.append((call, arg_of(ctx, call, "state_dict", 0), arg_of(ctx, call, "checkpoint_id", 1)))
        for call in ctx.method_calls("save"):
            recv = dotted(receiver(call)) or ""
            last = recv.rsplit(".", 1)[-1].lower()
            if ctx.qualname(call.func) in SAVE_FUNCS:
                continue
            if last == "accelerator":
                out.append((call, arg_of(ctx, call, "obj", 0), arg_of(ctx, call, "f", 1)))
            elif last == "fabric":
                out.append((call, arg_of(ctx, call, "state", 1), arg_of(ctx, call, "path", 0)))
        # (every wrapper's name spells "save_on_ma"; in an ASCII file, identifiers are as written)
        if not ctx.source.isascii() or "save_on_ma" in ctx.source:
            for call in ctx.of(ast.Call):
                name = callee_name(call)
                if name in SAVE_WRAPPERS:
                    out.append((call, arg_of(ctx, call, "obj", 0), arg_of(ctx, call, "f", 1)))
        self.complete_saves.extend(ctx.calls_to(*COMPLETE_SAVES))
        for method, owners in _COMPLETE_METHODS.items():
            for call in ctx.method_calls(method):
                recv = (dotted(receiver(call)) or "").rsplit(".", 1)[-1].lower()
                if any(o in recv for o in owners):
                    self.complete_saves.append(call)
        out.sort(key=lambda t: (t[0].lineno, t[0].col_offset))
        return out

    def _add_sites(self, call: ast.Call, obj: ast.expr | None, path: ast.expr | None) -> None:
        """The save's site, or one per caller when a local helper saves its parameter."""
        ctx = self.ctx
        fn = ctx.function_of(call)
        callers: list[ast.Call] = []
        if isinstance(fn, FUNCTION_DEFS) and not ctx.enclosing_loops(call):
            callers = self.objects.callers_of(fn)
        params = _params(fn) if isinstance(fn, FUNCTION_DEFS) else {}
        substituted = callers and any(
            isinstance(e, ast.Name) and e.id in params and self.objects.is_param_only(e) for e in (obj, path)
        )
        # The helper builds what it saves (only its path comes from the caller): the helper decides
        # what is saved, so findings go to its own save, as the doctor reports the save it sees.
        builds_own = not (isinstance(obj, ast.Name) and obj.id in params and self.objects.is_param_only(obj))
        if substituted and isinstance(fn, FUNCTION_DEFS):  # (callers are only looked for in a def)
            for caller in callers:
                subst = {name: _call_arg(caller, name, pos, params_is_method(fn)) for name, pos in params.items()}
                saved = self.contents.analyze(obj, subst=subst)
                path_expr = path
                if isinstance(path, ast.Name) and path.id in subst and self.objects.is_param_only(path):
                    path_expr = subst[path.id]
                self._append(SaveSite(call, call if builds_own else caller, [caller], obj, path_expr, saved))
        else:
            contexts = list(callers) if callers else [call]
            self._append(SaveSite(call, call, contexts, obj, path, self.contents.analyze(obj)))

    def _append(self, site: SaveSite, into: list[SaveSite] | None = None) -> None:
        """Add ``site`` (to ``sites`` unless told ``into``), placed in the training loop (or not)
        by its contexts."""
        site.in_training_loop = any(
            self.loops.in_training_loop(c) for c in site.contexts
        ) or self.loops.in_periodic_hook(site.call)
        site.mid_epoch = any(self.loops.mid_epoch(c) for c in site.contexts)
        (self.sites if into is None else into).append(site)

    def _find_other_saves(self) -> None:
        """External calls like ``utils.save_checkpoint(model, optimizer, ...)`` may save anything."""
        ctx = self.ctx
        save_ids = {id(c) for c, _, _ in self._save_calls} | self._through_ids
        for call in ctx.of(ast.Call):
            name = (callee_name(call) or "").lower()
            if not RX_SAVE_WORD.search(name) or name in ("save_pretrained",):
                continue
            if id(call) in save_ids or self.objects.local_target(call) is not None:
                continue
            if RX_READS_CHECKPOINT.search(name) and "save" not in name:
                continue  # ``restart_from_checkpoint(path, optimizer=...)`` reads a file, writes none
            if ctx.qualname(call.func) in COMPLETE_SAVES:
                continue
            for arg in [*call.args, *(k.value for k in call.keywords)]:
                if self._mentions_training_state(arg):
                    self.opaque_saves.append(call)
                    break

    def _mentions_training_state(self, expr: ast.AST) -> bool:
        """Whether ``expr`` names an optimizer, scheduler or scaler."""
        # ``opt = parser.parse_args()`` is a config namespace, whatever its name says
        # (``save_image(x, "%s/real.png" % opt.outf)`` saves no optimizer).
        config = self.ctx.parsed_args_names
        for node in ast.walk(expr):
            if isinstance(node, (ast.Name, ast.Attribute)):
                text = dotted(node)
                if text and text.split(".", 1)[0] in config:
                    continue
                if text and self.objects.classify(node) in (OPTIMIZER, SCHEDULER, SCALER):
                    return True
        return False

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
        return any(s.saved.may_hold(kind) for s in self.sites if not self.copies_load(s))

    def copies_load(self, site: SaveSite) -> bool:
        """The save writes back a checkpoint the file loaded (``best = torch.load(f); best["model_state"]
        = ...; torch.save(best, f)``): it holds what an earlier save wrote, no state of its own."""
        obj = site.obj
        if not isinstance(obj, ast.Name) or site.report is not site.call:
            return False
        bound = self.contents.reaching(obj)[0]
        return bool(bound) and all(
            isinstance(b, ast.Call) and self.ctx.qualname(b.func) in LOAD_FUNCS for b in bound or ()
        )

    @cached_property
    def _schedule_position_set_by_hand(self) -> bool:
        """``scheduler.last_epoch = start_epoch - 1``, or a replay (a loop that only steps schedules,
        ``for _ in range(start_epoch * ipe): scheduler.step()``): the schedule is restored from the
        epoch."""
        for node in self.ctx.of(ast.Assign):
            for t in node.targets:
                if (
                    isinstance(t, ast.Attribute)
                    and t.attr == "last_epoch"
                    and self.objects.classify(t.value) == SCHEDULER
                ):
                    return True
        for call in self.ctx.method_calls("step"):
            stmt = self.ctx.parent(call)
            loop = self.ctx.parent(stmt) if stmt is not None else None
            if (
                isinstance(loop, (ast.For, ast.While))
                and self.objects.classify(receiver(call)) == SCHEDULER
                and all(self._replays(stmt) for stmt in loop.body)
            ):
                return True
        return False

    def _replays(self, stmt: ast.stmt) -> bool:
        """A statement of a replay loop: ``scheduler.step()`` (no epoch) or ``next(schedule)``."""
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not isinstance(call, ast.Call):
            return False
        if isinstance(call.func, ast.Name):
            return call.func.id == "next"
        return (
            isinstance(call.func, ast.Attribute)
            and call.func.attr == "step"
            and not call.args
            and self.objects.classify(call.func.value) == SCHEDULER
        )


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, int]:
    """Parameter name -> positional index (keyword-only parameters get -1)."""
    a = fn.args
    out: dict[str, int] = {}
    for i, p in enumerate([*a.posonlyargs, *a.args]):
        out[p.arg] = i
    for p in a.kwonlyargs:
        out[p.arg] = -1
    return out


def params_is_method(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> bool:
    """Whether ``fn``'s first parameter is ``self`` or ``cls`` (a call passes it implicitly)."""
    a = fn.args
    first = [*a.posonlyargs, *a.args][:1]
    return bool(first) and first[0].arg in ("self", "cls")


def _call_arg(call: ast.Call, name: str, pos: int, method: bool) -> ast.expr | None:
    """The argument a call of a local function passes for parameter ``name`` (at ``pos``)."""
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
