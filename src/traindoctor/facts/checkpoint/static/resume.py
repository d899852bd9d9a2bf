"""What a resumed run gets back: the state the file's resume path restores (TD503-TD505).

A file resumes when it restores its model or optimizer from a checkpoint it loads. A state that
resume path never restores (no ``load_state_dict`` of it, no read of a key that names it) is lost
whatever the save holds, and a model restore from a loaded checkpoint that skips state saved
beside the model is an incomplete resume (:meth:`ResumeAnalysis.resume_gaps`).
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from traindoctor.facts.checkpoint.static.base import IndexPart, TrainingObjects, arg_of
from traindoctor.facts.checkpoint.static.saves import Saves, SaveSite, after_training_loop
from traindoctor.facts.checkpoint.static.vocabulary import (
    COMPLETE_LOADS,
    DCP_SAVES,
    LOAD_FUNCS,
    key_rules_out,
    kind_from_name,
)
from traindoctor.static.names import dotted, receiver
from traindoctor.static.vocab import MODEL, OPTIMIZER, RNG_ANY, RNG_KINDS, SCALER, SCHEDULER

if TYPE_CHECKING:  # pragma: no cover
    from traindoctor.static.project import Place

#: Names of configs (``config``, ``cfg``, ``train_cfg``, ``args``): a key read off one is no checkpoint entry.
_RX_CONFIG_NAME = re.compile(
    r"^(configs?|cfg|conf|args|hparams|hps|hyper_?params|settings|options|opts?|kwargs)$|(^|_)(cfg|config|conf|args)$|^(cfg|config|conf)_"
)
#: Calls whose value is a loaded checkpoint dict.
_CHECKPOINT_READS = (*LOAD_FUNCS, "torch.hub.load_state_dict_from_url")


class ResumeAnalysis(IndexPart):
    """The resume path of one file and what it restores."""

    def __init__(self, objects: TrainingObjects, saves: Saves) -> None:
        super().__init__(objects)
        self.saves = saves
        #: Model restore (id) -> the saves of project helpers that write the state it skips.
        self.saved_by: dict[int, list[Place]] = {}

    def kept_on_resume(self, kind: str) -> bool:
        """Whether a resumed run can get ``kind`` back: some save may hold it, and the resume
        path, when the file has one, restores it.

        A resume path makes a missing state *more* certain: ``iter_num = ckpt["iter_num"]`` puts
        opaque values into the next save (so the save "may hold" anything), but the resume code
        says exactly what comes back, and a state it never restores is lost whatever is saved.
        """
        if not self.saves.may_hold_anywhere(kind):
            return False
        if self.saves.complete_saves or self.saves.opaque_saves or any(s.saved.has(kind) for s in self.saves.sites):
            return True  # saved for sure, or nothing is known: whether resume restores it is TD505's
        return not self.resume_misses(kind)

    def resume_misses(self, kind: str) -> bool:
        """Whether the file resumes (restores its model or optimizer from a checkpoint it loads)
        and never restores ``kind``: no ``<kind>.load_state_dict``, no read of a key that names
        it, and for RNG kinds no ``set_rng_state``/``setstate``/``set_state`` anywhere."""
        ctx = self.ctx
        if not self.saves.loads or self.saves.complete_saves or ctx.calls_to(*COMPLETE_LOADS):
            return False
        loads = ctx.method_calls("load_state_dict")
        if any(self.objects.classify(receiver(c)) == kind for c in loads):
            return False
        resumes = False
        for call in loads:
            if self.objects.classify(receiver(call)) in (MODEL, OPTIMIZER):
                arg = arg_of(ctx, call, "state_dict", 0)
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
                bound = [b for b in self._reaching(arg) or () if b is not None]
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
        restored when a ``<object of that kind>.load_state_dict`` or a read of its key off a
        checkpoint (``ckpt["optimizer"]``, ``ckpt.get("optimizer")``) may run on the same path as
        the model restore: anywhere in the file but in another branch of an ``if`` around both (a
        resume from the run's own checkpoint beside a ``--continue-from`` of another run's) or in
        a method of another class (several trainers in one file). A
        generous reading, so only a resume that plainly ignores the saved state is reported; a key
        read off a config (``config["optimizer"]["type"]``) or off an entry of the checkpoint
        (``ckpt["config"]["optimizer"]``) is no restore of that state. One finding per function
        for the restores it makes of one checkpoint (``model`` and ``model_ema``).
        """
        ctx = self.ctx
        if self.saves.complete_saves or ctx.calls_to(*COMPLETE_LOADS):
            return []
        dcp_gaps = self._dcp_resume_gaps()
        if not self.saves.loads:
            return dcp_gaps
        loads = ctx.method_calls("load_state_dict")
        key_reads = self._key_reads()
        out: list[tuple[ast.Call, list[tuple[str, str]]]] = []
        for call in loads:
            if self.objects.classify(receiver(call)) != MODEL:
                continue
            arg = arg_of(ctx, call, "state_dict", 0)
            key = self._loaded_key(arg) if arg is not None else None
            keys = {key} if key is not None else self._keys_read_beside(call)
            if not keys or self._inference_only(call) or self._frozen_after(call):
                continue
            on_path = [c for c in loads if self._on_path(c, call)]
            restored = {self.objects.classify(receiver(c)) for c in on_path}
            read_keys = {k for node, k in key_reads if self._on_path(node, call)}
            gaps: set[tuple[str, str]] = set()
            via: list[Place] = []
            for site in [*self.saves.sites, *self.saves.project_sites]:
                if not keys & site.saved.weight_keys() or site.saved.is_opaque:
                    continue
                if after_training_loop(ctx, call, site):
                    continue  # reading the result back for evaluation, not resuming
                before = len(gaps)
                for kind in (OPTIMIZER, SCHEDULER, SCALER):
                    if kind in restored:
                        gaps.update((kind, k) for k in self._named_left(site, kind, on_path) if k not in read_keys)
                        continue
                    gaps.update((kind, k) for k in site.saved.keys_of(kind) if k not in read_keys)
                if len(gaps) > before and site.via is not None and site.via not in via:
                    via.append(site.via)
            if gaps:
                # (a model restored in two branches, ``model.module.load_state_dict`` or not, or
                # two models of one checkpoint, ``model`` and ``model_ema``: once)
                fn = ctx.function_of(call)
                if any(ctx.function_of(c) is fn and g == sorted(gaps) for c, g in out):
                    continue
                out.append((call, sorted(gaps)))
                self.saved_by[id(call)] = via
        return out + dcp_gaps

    def _key_reads(self) -> list[tuple[ast.AST, str]]:
        """(node, key) of every read of a string key that may read a checkpoint's entry:
        ``x["k"]``, ``x.get("k")``, ``x.pop("k")``, where ``x`` is no entry of a dict
        (``ckpt["config"]["optimizer"]``) and is not named like a config (``config``, ``cfg``,
        ``self.config``, ``args``, the script's parsed arguments)."""
        ctx = self.ctx
        out: list[tuple[ast.AST, str]] = []
        for sub in ctx.of(ast.Subscript):
            if (
                isinstance(sub.ctx, ast.Load)
                and isinstance(sub.slice, ast.Constant)
                and isinstance(sub.slice.value, str)
                and self._may_be_checkpoint(sub.value)
            ):
                out.append((sub, sub.slice.value))
        for attr in ("get", "pop"):
            for call in ctx.method_calls(attr):
                if (
                    call.args
                    and isinstance(call.args[0], ast.Constant)
                    and isinstance(call.args[0].value, str)
                    and isinstance(call.func, ast.Attribute)
                    and self._may_be_checkpoint(call.func.value)
                ):
                    out.append((call, call.args[0].value))
        return out

    def _may_be_checkpoint(self, base: ast.expr) -> bool:
        """Whether a dict whose key is read may be a loaded checkpoint (see :meth:`_key_reads`)."""
        if isinstance(base, (ast.Subscript, ast.Call)):
            return False
        text = dotted(base)
        if text is None:
            return True
        if text.split(".", 1)[0] in self.ctx.parsed_args_names:
            return False
        return not _RX_CONFIG_NAME.search(text.rsplit(".", 1)[-1].lower())

    def _on_path(self, node: ast.AST, call: ast.Call) -> bool:
        """Whether ``node`` (a restore, a key read) may run on the resume path of the model
        restore ``call``: not in another branch of an ``if`` around both, and not in a method of
        another class (a file of several trainer classes, each resuming its own checkpoint)."""
        ctx = self.ctx
        return not self._exclusive(node, call) and ctx.enclosing(node, ast.ClassDef) in (
            None,
            ctx.enclosing(call, ast.ClassDef),
        )

    def _exclusive(self, a: ast.AST, b: ast.AST) -> bool:
        """Whether ``a`` and ``b`` lie in different branches of one ``if`` (they never run on the
        same path)."""
        ctx = self.ctx
        for anc in ctx.ancestors(a):
            if isinstance(anc, ast.If) and ctx.within(b, anc):
                a_body = any(ctx.within(a, s) for s in anc.body)
                b_body = any(ctx.within(b, s) for s in anc.body)
                a_else = any(ctx.within(a, s) for s in anc.orelse)
                b_else = any(ctx.within(b, s) for s in anc.orelse)
                return (a_body and b_else) or (a_else and b_body)
        return False

    def owner_of(self, kind: str, key: str) -> str | None:
        """The object whose ``state_dict()`` a save of the file writes under ``key`` (for advice)."""
        for site in self.saves.sites:
            for piece in site.saved.pieces:
                node = piece.node
                if (
                    piece.kind == kind
                    and piece.key == key
                    and isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "state_dict"
                ):
                    return dotted(node.func.value)
        return None

    def _named_left(self, site: SaveSite, kind: str, loads: list[ast.Call]) -> list[str]:
        """Keys of a save holding the states of two or more objects of ``kind`` by name (a GAN's
        ``"G_scaler": self.G_scaler.state_dict()`` and ``"D_scaler": ...``) whose object is never
        restored (no ``self.G_scaler.load_state_dict``) while another of them is."""
        named: dict[str, str] = {}
        for piece in site.saved.pieces:
            node = piece.node
            if piece.kind != kind or piece.key is None:
                continue
            if not (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "state_dict"
            ):
                return []
            name = dotted(node.func.value)
            if name is None:
                return []
            named[piece.key] = name
        if len(set(named.values())) < 2:
            return []
        loaded = {dotted(receiver(c)) for c in loads}
        if not loaded & set(named.values()):
            return []
        return [k for k, n in named.items() if n not in loaded]

    def _frozen_after(self, call: ast.Call) -> bool:
        """``teacher.load_state_dict(ckpt["model"])`` followed, within the next few statements of
        its block, by ``teacher.eval()``: a model loaded to run beside training (a distillation
        teacher), not the one the run resumes."""
        ctx = self.ctx
        stmt = ctx.parent(call)
        block = ctx.parent(stmt) if isinstance(stmt, ast.Expr) else None
        model = dotted(receiver(call))
        if block is None or model is None:
            return False
        for field in ("body", "orelse", "finalbody"):
            body = getattr(block, field, None)
            if isinstance(body, list) and stmt in body:
                i = body.index(stmt)
                for later in body[i + 1 : i + 4]:
                    if (
                        isinstance(later, ast.Expr)
                        and isinstance(later.value, ast.Call)
                        and isinstance(later.value.func, ast.Attribute)
                        and later.value.func.attr == "eval"
                        and dotted(later.value.func.value) == model
                    ):
                        return True
        return False

    def _inference_only(self, node: ast.AST) -> bool:
        """Whether ``node`` sits in a function that only runs the model: it never calls
        ``backward()`` or ``step()``, and it switches to ``eval()`` or opens ``torch.no_grad()`` /
        ``torch.inference_mode()`` (a ``generate()`` or ``evaluate()`` that loads weights to
        sample or score is not a resume path, whatever else the save holds)."""
        ctx = self.ctx
        fn = ctx.function_of(node)
        if fn is None:
            return False

        def here(calls: list[ast.Call]) -> bool:
            return any(ctx.function_of(c) is fn for c in calls)

        if here(ctx.method_calls("backward")) or here(ctx.method_calls("step")):
            return False
        if self.saves.loops.trains_in(fn):
            return False  # it trains, through a helper it calls in a loop (``train_one_epoch(...)``)
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
            kind_from_name(p.arg) == OPTIMIZER for p in (*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs)
        ):
            return False  # a load helper handed the optimizer (``load_checkpoint(path, model, opt)``)
        if here(ctx.method_calls("eval")):
            return True
        return any(
            ctx.function_of(w) is fn
            and any(
                isinstance(item.context_expr, ast.Call)
                and ctx.qualname(item.context_expr.func) in ("torch.no_grad", "torch.inference_mode")
                for item in w.items
            )
            for w in ctx.of(ast.With)
        )

    def _dcp_resume_gaps(self) -> list[tuple[ast.Call, list[tuple[str, str]]]]:
        """``dcp.load({"model": ...})`` where a DCP save of this file also holds optimizer state.

        DCP fills only the keys of the dict it is given, so a load dict without the saved
        optimizer/scheduler/scaler keys restores the model alone. Silent when the load dict
        cannot be read or the state is restored some other way.
        """
        ctx = self.ctx
        out: list[tuple[ast.Call, list[tuple[str, str]]]] = []
        dcp_sites = [s for s in self.saves.sites if ctx.qualname(s.call.func) in DCP_SAVES and not s.saved.is_opaque]
        if not dcp_sites:
            return out
        restored = {self.objects.classify(receiver(c)) for c in ctx.method_calls("load_state_dict")}
        if ctx.calls_to("torch.distributed.checkpoint.state_dict.set_optimizer_state_dict"):
            restored.add(OPTIMIZER)
        for call in ctx.calls_to("torch.distributed.checkpoint.state_dict.set_state_dict"):
            optim = ctx.arg(call, "optim_state_dict")
            if not (isinstance(optim, ast.Dict) and not optim.keys):
                restored.add(OPTIMIZER)
        for call in self.saves.dcp_loads:
            loaded = self._dict_keys(arg_of(ctx, call, "state_dict", 0))
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

    def _keys_read_beside(self, call: ast.Call) -> set[str]:
        """The keys read, in the function of the model restore ``call``, from a checkpoint that
        function loads (``ckpt = torch.load(path)``), when the restored dict is built from them
        in ways not followed (``saved = ckpt["model"]`` copied key by key into ``new_state_dict``,
        one name bound to two entries): a load helper such as ``load_checkpoint(path, model,
        optimizer)`` that restores the model from the file. Empty when the loaded dict is handed
        to an unknown call (it may be restored there)."""
        ctx = self.ctx
        fn = ctx.function_of(call)
        if fn is None:
            return set()
        keys: set[str] = set()
        for node in ast.walk(fn):
            base: ast.AST | None = None
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                if isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
                    base, key = node.value, node.slice.value
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                base, key = node.func.value, node.args[0].value
            if isinstance(base, ast.Name) and self._is_loaded_checkpoint(base) and self._loaded_before(base, call):
                keys.add(key)
        return keys

    def _loaded_before(self, name: ast.Name, call: ast.Call) -> bool:
        """Some ``torch.load`` bound to ``name`` runs before ``call`` on the same path (not in the
        other branch of an ``if``: a Caffe2 import beside the torch checkpoint's restore)."""
        ctx = self.ctx
        for bound in ctx.bindings_of(name) or ():
            if bound is None or (bound.lineno, bound.col_offset) >= (call.lineno, call.col_offset):
                continue
            exclusive = False
            for anc in ctx.ancestors(bound):
                if isinstance(anc, ast.If) and ctx.within(call, anc):
                    in_body = any(ctx.within(bound, b) for b in anc.body)
                    call_in_body = any(ctx.within(call, b) for b in anc.body)
                    exclusive = in_body != call_in_body
                    break
            if not exclusive:
                return True
        return False

    def _is_loaded_checkpoint(self, name: ast.Name) -> bool:
        """Every binding of ``name`` that reaches this use is a ``torch.load`` (or hub read), one
        load or one per branch (``torch.hub.load_state_dict_from_url`` for an https ``--resume``,
        ``torch.load`` otherwise: DeiT-style scripts), and the loaded dict is never handed to an
        unknown call of its scope (where it may be restored: stay silent). The name may be bound
        to other things elsewhere in its scope (``checkpoint = None`` to free memory after the
        resume, ``ckpt = safetensors.load_file(...)`` in a weights-only branch, the dict the
        training loop saves): only the binding that reaches the read counts."""
        ctx = self.ctx
        bound = self._reaching(name)
        if not bound or not all(isinstance(b, ast.Call) and ctx.qualname(b.func) in _CHECKPOINT_READS for b in bound):
            return False
        if not any(isinstance(b, ast.Call) and ctx.qualname(b.func) in LOAD_FUNCS for b in bound):
            return False
        scope = ctx.scope_of(name)
        for use in self.objects.name_uses.get(name.id, ()):
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
            if isinstance(call, ast.Call) and call.func is not use and not self.objects.benign_consumer(call):
                return False
        return True

    def _reaching(self, name: ast.Name) -> list[ast.expr | None] | None:
        """The bindings of ``name`` that may reach this use (see :meth:`SaveContents.reaching`)."""
        return self.saves.contents.reaching(name)[0]

    def _loaded_key(self, arg: ast.AST) -> str | None:
        """``"model"`` for ``ckpt["model"]`` / ``ckpt.get("model")`` where ``ckpt = torch.load(...)``."""
        ctx = self.ctx
        for _ in range(3):
            if isinstance(arg, ast.Name):
                bound = self._reaching(arg)
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
        return key if self._is_loaded_checkpoint(base) else None
